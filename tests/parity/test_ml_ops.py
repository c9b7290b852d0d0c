"""Parity of the ai.onnx.ml feature transforms, linear models and tree ensembles (what
scikit-learn, LightGBM and XGBoost models convert to) and of MaxRoiPool, onyx against onnxruntime
(CPU), one node at a time on fresh random inputs, through onyx's Python API (string tensors in and
out); seeds are printed (pytest -s) and in every failure message (ONYX_PARITY_SEED=<seed>).
Float outputs within 1e-5 of the output's largest magnitude (onyx computes in double, onnxruntime
in float), labels, strings and integers exactly.
"""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_contrib_ops import check, fresh_rng, run_ort  # noqa: E402

onyx = pytest.importorskip("onyx")

TOL = 1e-5


def ml_node(op, inputs, outputs, attrs, domain="ai.onnx.ml", weights=()):
    """A model of one node; `inputs`: (name, array) pairs (names in `weights` become initializers);
    `outputs`: (name, elem_type) pairs."""
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], domain=domain, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in inputs if n not in weights]
    inits = [numpy_helper.from_array(a, n) for n, a in inputs if n in weights]
    graph = helper.make_graph([node], op.lower(), graph_inputs,
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("ai.onnx.ml", 3)])


def same(name, got, ref, seed):
    if np.issubdtype(ref.dtype, np.floating):
        check(name, got, ref, TOL, seed)
    else:
        assert got.shape == ref.shape, f"{name}: shape {got.shape} vs {ref.shape} (seed {seed})"
        assert [str(v) for v in got.reshape(-1)] == [str(v) for v in ref.reshape(-1)], f"{name} differs (seed {seed})"


def run_both(name, model, feeds, run_onyx, tmp_path, seed):
    ref = run_ort(model, feeds)
    sess = onyx.InferenceSession(model.SerializeToString())
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    for out in ref:
        same(f"{name} {out}", np.asarray(got[out]), ref[out], seed)


F = TensorProto.FLOAT


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64], ids=["f32", "f64", "i64"])
def test_scaler_and_normalizer(dtype, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    x = (rng.standard_normal((4, 5)) * 4).astype(dtype)
    x[:, 2] = np.abs(x[:, 2]) + 1  # every row's largest value positive (MAX divides by it)
    model = ml_node("Scaler", [("X", x)], [("Y", F)], {"offset": list(rng.standard_normal(5)),
                                                         "scale": list(rng.uniform(-2, 2, 5))})
    run_both("Scaler", model, {"X": x}, run_onyx, tmp_path, seed)
    for norm in ("MAX", "L1", "L2"):
        model = ml_node("Normalizer", [("X", x)], [("Y", F)], {"norm": norm})
        run_both(f"Normalizer {norm}", model, {"X": x}, run_onyx, tmp_path, seed)


def test_imputer(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    x = rng.standard_normal((5, 3)).astype(np.float32)
    x[rng.random((5, 3)) < 0.4] = np.nan
    model = ml_node("Imputer", [("X", x)], [("Y", F)], {"imputed_value_floats": [1.5, -2.0, 7.0],
                                                          "replaced_value_float": float("nan")})
    run_both("Imputer NaN", model, {"X": x}, run_onyx, tmp_path, seed)
    x = np.where(np.isnan(x), 0.0, x).astype(np.float32)  # the default replaced value is 0
    model = ml_node("Imputer", [("X", x)], [("Y", F)], {"imputed_value_floats": [4.0]})
    run_both("Imputer default", model, {"X": x}, run_onyx, tmp_path, seed)
    xi = rng.integers(-2, 3, (5, 3)).astype(np.int64)
    model = ml_node("Imputer", [("X", xi)], [("Y", TensorProto.INT64)],
                    {"imputed_value_int64s": [9], "replaced_value_int64": 0})
    run_both("Imputer int64", model, {"X": xi}, run_onyx, tmp_path, seed)


def test_one_hot_and_category_mapper(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    words = np.array(["a", "b", "c", "zz"])
    s = rng.choice(words, (3, 4)).astype(object)
    model = ml_node("OneHotEncoder", [("X", s)], [("Y", F)], {"cats_strings": ["a", "b", "c"], "zeros": 1})
    run_both("OneHotEncoder strings", model, {"X": s}, run_onyx, tmp_path, seed)
    i = rng.integers(0, 6, (7,)).astype(np.int64)
    model = ml_node("OneHotEncoder", [("X", i)], [("Y", F)], {"cats_int64s": [0, 2, 4, 5], "zeros": 1})
    run_both("OneHotEncoder ints", model, {"X": i}, run_onyx, tmp_path, seed)
    model = ml_node("CategoryMapper", [("X", s)], [("Y", TensorProto.INT64)],
                    {"cats_strings": ["a", "b", "c"], "cats_int64s": [10, 20, 30], "default_int64": -7})
    run_both("CategoryMapper to ints", model, {"X": s}, run_onyx, tmp_path, seed)
    model = ml_node("CategoryMapper", [("X", i)], [("Y", TensorProto.STRING)],
                    {"cats_strings": ["x", "y"], "cats_int64s": [2, 4], "default_string": "none"})
    run_both("CategoryMapper to strings", model, {"X": i}, run_onyx, tmp_path, seed)


def test_feature_vectorizer(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    a, b, c = (rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32),
               rng.standard_normal((3, 1)).astype(np.float32))
    model = ml_node("FeatureVectorizer", [("A", a), ("B", b), ("C", c)], [("Y", F)], {"inputdimensions": [3, 2, 1]})
    run_both("FeatureVectorizer", model, {"A": a, "B": b, "C": c}, run_onyx, tmp_path, seed)


def test_linear_regressor(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    x = rng.standard_normal((6, 4)).astype(np.float32)
    model = ml_node("LinearRegressor", [("X", x)], [("Y", F)],
                    {"coefficients": list(rng.standard_normal(8)), "intercepts": list(rng.standard_normal(2)), "targets": 2})
    run_both("LinearRegressor", model, {"X": x}, run_onyx, tmp_path, seed)


# classes (rows of coefficients), labels, post_transform
LINEAR_CLASSIFIER_CASES = {
    "multiclass_softmax": (3, [7, 8, 9], "SOFTMAX"),
    "multiclass_none_strings": (4, ["w", "x", "y", "z"], "NONE"),
    "multiclass_logistic": (3, [0, 1, 2], "LOGISTIC"),
    "binary_one_row": (1, [0, 1], "NONE"),
    "binary_one_row_logistic": (1, ["no", "yes"], "LOGISTIC"),
    "binary_one_row_softmax": (1, [3, 4], "SOFTMAX"),
}


@pytest.mark.parametrize("name", list(LINEAR_CLASSIFIER_CASES))
def test_linear_classifier(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    classes, labels, post = LINEAR_CLASSIFIER_CASES[name]
    x = rng.standard_normal((8, 5)).astype(np.float32)
    attrs = {"coefficients": list(rng.standard_normal(classes * 5)), "intercepts": list(rng.standard_normal(classes)),
             "post_transform": post}
    attrs["classlabels_strings" if isinstance(labels[0], str) else "classlabels_ints"] = labels
    label_type = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    model = ml_node("LinearClassifier", [("X", x)], [("Y", label_type), ("Z", F)], attrs)
    run_both(name, model, {"X": x}, run_onyx, tmp_path, seed)


def test_max_roi_pool(run_onyx, tmp_path):
    rng, seed = fresh_rng()
    x = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    rois = np.array([[0, 1, 1, 7, 9], [1, 0, 2, 9, 11], [0, 4.4, 3.6, 5.2, 4.1], [1, -2, -3, 3, 2]], np.float32)
    model = ml_node("MaxRoiPool", [("X", x), ("rois", rois)], [("Y", F)], {"pooled_shape": [3, 2], "spatial_scale": 0.9},
                    domain="")
    run_both("MaxRoiPool", model, {"X": x, "rois": rois}, run_onyx, tmp_path, seed)


def random_forest(rng, trees, depth, features, outputs, per_leaf):
    """Full binary trees of `depth` with random features and thresholds; each leaf adds weights
    to `per_leaf` random outputs. Returns the nodes_* attributes and the leaves' (tree, node, output, weight)."""
    nodes = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                             "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    leaves = []
    modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"]
    for t in range(trees):
        for i in range(2 ** (depth + 1) - 1):
            leaf = i >= 2 ** depth - 1
            nodes["nodes_treeids"].append(t)
            nodes["nodes_nodeids"].append(i)
            nodes["nodes_featureids"].append(int(rng.integers(0, features)) if not leaf else 0)
            nodes["nodes_values"].append(float(rng.standard_normal()) if not leaf else 0.0)
            nodes["nodes_modes"].append("LEAF" if leaf else modes[int(rng.integers(0, 4))])
            nodes["nodes_truenodeids"].append(2 * i + 1 if not leaf else 0)
            nodes["nodes_falsenodeids"].append(2 * i + 2 if not leaf else 0)
            nodes["nodes_missing_value_tracks_true"].append(int(rng.integers(0, 2)))
            if leaf:
                for o in rng.choice(outputs, per_leaf, replace=False):
                    leaves.append((t, i, int(o), float(rng.uniform(-1, 1))))
    return nodes, leaves


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_ensemble_regressor(aggregate, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    nodes, leaves = random_forest(rng, trees=4, depth=3, features=5, outputs=2, per_leaf=2)
    attrs = dict(nodes, n_targets=2, aggregate_function=aggregate, base_values=[0.25, -0.5],
                 target_treeids=[l[0] for l in leaves], target_nodeids=[l[1] for l in leaves],
                 target_ids=[l[2] for l in leaves], target_weights=[l[3] for l in leaves])
    x = rng.standard_normal((16, 5)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values take the branch their node says
    model = ml_node("TreeEnsembleRegressor", [("X", x)], [("Y", F)], attrs)
    run_both(f"TreeEnsembleRegressor {aggregate}", model, {"X": x}, run_onyx, tmp_path, seed)


# labels, classes the leaves add to, post_transform
TREE_CLASSIFIER_CASES = {
    "multiclass_softmax": ([3, 5, 9], 3, "SOFTMAX"),
    "multiclass_strings_none": (["a", "b", "c", "d"], 4, "NONE"),
    "binary_logistic": ([0, 1], 1, "LOGISTIC"),
    "binary_none": (["neg", "pos"], 1, "NONE"),
    "binary_signed_none": ([0, 1], 1, "NONE"),
}


@pytest.mark.parametrize("name", list(TREE_CLASSIFIER_CASES))
def test_tree_ensemble_classifier(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    labels, used, post = TREE_CLASSIFIER_CASES[name]
    nodes, leaves = random_forest(rng, trees=3, depth=3, features=4, outputs=used, per_leaf=used if used > 1 else 1)
    signed = name == "binary_signed_none"
    attrs = dict(nodes, post_transform=post, class_treeids=[l[0] for l in leaves], class_nodeids=[l[1] for l in leaves],
                 class_ids=[l[2] for l in leaves],
                 class_weights=[l[3] if signed else abs(l[3]) / 3 for l in leaves])
    attrs["classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"] = labels
    x = rng.standard_normal((16, 4)).astype(np.float32)
    label_type = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    model = ml_node("TreeEnsembleClassifier", [("X", x)], [("Y", label_type), ("Z", F)], attrs)
    run_both(name, model, {"X": x}, run_onyx, tmp_path, seed)


# kernel, kernel_params, support vectors (0: the linear form), one_class
SVM_REGRESSOR_CASES = {
    "rbf": ("RBF", [0.3, 0.0, 3], 6, 0),
    "poly": ("POLY", [0.2, 1.0, 3], 5, 0),
    "sigmoid_one_class": ("SIGMOID", [0.1, 0.5, 3], 4, 1),
    "linear_form": ("LINEAR", [], 0, 0),
}


@pytest.mark.parametrize("name", list(SVM_REGRESSOR_CASES))
def test_svm_regressor(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    kernel, params, supports, one_class = SVM_REGRESSOR_CASES[name]
    features = 4
    attrs = {"kernel_type": kernel, "rho": [float(rng.standard_normal())], "one_class": one_class,
             "n_supports": supports, "kernel_params": params or [0.1, 0.0, 1],  # onnxruntime requires them
             "coefficients": list(rng.standard_normal(supports if supports else features))}
    if supports:
        attrs["support_vectors"] = list(rng.standard_normal(supports * features))
    x = rng.standard_normal((7, features)).astype(np.float32)
    model = ml_node("SVMRegressor", [("X", x)], [("Y", F)], attrs)
    run_both(f"SVMRegressor {name}", model, {"X": x}, run_onyx, tmp_path, seed)


# classes, kernel, with Platt probabilities, labels as strings, post_transform
SVM_CLASSIFIER_CASES = {
    "three_classes_rbf": (3, "RBF", False, False, "NONE"),
    "three_classes_rbf_proba": (3, "RBF", True, False, "NONE"),
    "four_classes_poly_proba_strings": (4, "POLY", True, True, "NONE"),
    "binary_rbf": (2, "RBF", False, False, "NONE"),
    "binary_rbf_proba": (2, "RBF", True, True, "NONE"),
    "linear_form_three": (3, "LINEAR", False, False, "NONE"),
    "linear_form_three_softmax": (3, "LINEAR", False, True, "SOFTMAX"),
    "linear_form_binary_logistic": (2, "LINEAR", False, False, "LOGISTIC"),
}


@pytest.mark.parametrize("name", list(SVM_CLASSIFIER_CASES))
def test_svm_classifier(name, run_onyx, tmp_path):
    rng, seed = fresh_rng()
    classes, kernel, proba, strings, post = SVM_CLASSIFIER_CASES[name]
    features = 3
    pairs = classes * (classes - 1) // 2
    labels = [f"c{i}" for i in range(classes)] if strings else [int(v) for v in rng.choice(50, classes, replace=False)]
    attrs = {"kernel_type": kernel, "kernel_params": [0.4, 0.5, 2], "post_transform": post}
    attrs["classlabels_strings" if strings else "classlabels_ints"] = labels
    if kernel == "LINEAR":  # no support vectors: one linear model per class
        attrs["coefficients"] = list(rng.standard_normal(classes * features))
        attrs["rho"] = [float(rng.standard_normal())]
    else:
        per_class = [int(v) for v in rng.integers(1, 4, classes)]
        vectors = sum(per_class)
        attrs["vectors_per_class"] = per_class
        attrs["support_vectors"] = list(rng.standard_normal(vectors * features))
        attrs["coefficients"] = list(rng.standard_normal((classes - 1) * vectors))
        attrs["rho"] = list(rng.standard_normal(pairs))
        if proba:
            attrs["prob_a"] = list(rng.uniform(-3, -0.5, pairs))
            attrs["prob_b"] = list(rng.uniform(-0.5, 0.5, pairs))
    x = rng.standard_normal((9, features)).astype(np.float32)
    label_type = TensorProto.STRING if strings else TensorProto.INT64
    model = ml_node("SVMClassifier", [("X", x)], [("Y", label_type), ("Z", F)], attrs)
    run_both(name, model, {"X": x}, run_onyx, tmp_path, seed)


def map_model(op, x_type, y_type, attrs):
    """One map op on a graph input of ONNX type x_type (a TypeProto) to y_type."""
    node = helper.make_node(op, ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_value_info("X", x_type)],
                              [helper.make_value_info("Y", y_type)])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("ai.onnx.ml", 3)])


def both(model, feeds):
    import onnxruntime as ort
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)
    return got, ref


@pytest.mark.parametrize("labels", [[3, 7, 9], ["a", "b", "c"]], ids=["ints", "strings"])
def test_zip_map(labels):
    """ZipMap: each row of scores a dict from label to score (what scikit-learn classifiers end in)."""
    rng, seed = fresh_rng()
    x = rng.random((4, 3)).astype(np.float32)
    key = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    attrs = {"classlabels_strings" if key == TensorProto.STRING else "classlabels_int64s": labels}
    y_type = helper.make_sequence_type_proto(helper.make_map_type_proto(key, helper.make_tensor_type_proto(F, [])))
    model = map_model("ZipMap", helper.make_tensor_type_proto(F, [None, 3]), y_type, attrs)
    (got,), (ref,) = both(model, {"X": x})
    assert isinstance(got, list) and len(got) == len(ref) == 4, f"seed {seed}"
    for g, r in zip(got, ref):
        assert set(g) == set(r), f"keys {sorted(g)} vs {sorted(r)} (seed {seed})"
        for k in r:
            assert abs(g[k] - r[k]) <= 1e-6, f"{k}: {g[k]} vs {r[k]} (seed {seed})"


def test_dict_vectorizer_and_cast_map():
    rng, seed = fresh_rng()
    words = ["w0", "w1", "w2", "w3", "w4"]
    d = {w: float(rng.standard_normal()) for w in rng.choice(words + ["other"], 4, replace=False)}
    x_type = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(F, []))
    model = map_model("DictVectorizer", x_type, helper.make_tensor_type_proto(F, None), {"string_vocabulary": words})
    (got,), (ref,) = both(model, {"X": d})
    check("DictVectorizer", got, ref, TOL, seed)
    m = {int(k): float(rng.standard_normal()) for k in rng.choice(8, 5, replace=False)}
    x_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, []))
    for form, to, out in [("DENSE", "TO_FLOAT", F), ("SPARSE", "TO_FLOAT", F), ("SPARSE", "TO_INT64", TensorProto.INT64)]:
        model = map_model("CastMap", x_type, helper.make_tensor_type_proto(out, None),
                          {"map_form": form, "cast_to": to, "max_map": 8})
        (got,), (ref,) = both(model, {"X": m})
        same(f"CastMap {form} {to}", np.asarray(got), ref, seed)
