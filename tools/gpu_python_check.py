"""The Python package on a GPU (run by gpu/run.sh on the GPU machine, with torch there):

1. a CUDA session's outputs equal the CPU session's (fp32 MLP made here with onnx.helper);
2. DLPack in: a torch cuda:0 tensor becomes an OrtValue at the same address (no copy) and
   feeds run_with_iobinding;
3. DLPack out: an output left on the device (bind_output("y", "cuda")) becomes a torch tensor
   at the output's own address, and an output bound to a torch buffer is written in place;
4. captured replays through run_with_iobinding (enable_cuda_graph): the input is rewritten in
   place in the bound torch tensor before every run (the seed-003 pattern: a stale read would
   show the previous step's values) and every replay's output equals torch's;
5. onyx.genai on cuda:0 generates the CPU's tokens.

usage: python3 gpu_python_check.py FIXTURES_DIR   (onyx importable through PYTHONPATH)
Prints one line per check and exits 1 if any fails.
"""
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import onyx
import onyx.genai as og

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(name)


def mlp(path, rng, d=64, h=256):
    w1 = rng.standard_normal((d, h)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((h, d)).astype(np.float32) * 0.1
    b1 = rng.standard_normal(h).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("Add", ["a", "b1"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]), helper.make_node("MatMul", ["c", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(b1, "b1")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    t = lambda a: torch.from_numpy(a).cuda()
    return lambda x: torch.relu(x @ t(w1) + t(b1)) @ t(w2)


def main():
    fixtures = sys.argv[1]
    rng = np.random.default_rng(20261201)
    tmp = tempfile.mkdtemp()
    path = f"{tmp}/mlp.onnx"
    ref = mlp(path, rng)
    print("devices:", onyx.devices(), "providers:", onyx.get_available_providers())

    # 1. CUDA against CPU
    x = rng.standard_normal((8, 64)).astype(np.float32)
    cpu = onyx.InferenceSession(path).run(None, {"x": x})[0]
    gpu_sess = onyx.InferenceSession(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    gpu = gpu_sess.run(None, {"x": x})[0]
    err = float(np.abs(gpu - cpu).max() / np.abs(cpu).max())
    check("cuda:0 run equals cpu", gpu_sess.device == "cuda:0" and err < 1e-5, f"max relative difference {err:.2e}")

    # 2 and 3. DLPack in and out, no copies
    xt = torch.from_numpy(x).cuda()
    xv = onyx.OrtValue.from_dlpack(xt)
    check("DLPack in: same address", xv.data_ptr() == xt.data_ptr() and xv.device_name() == "cuda",
          f"{xv.data_ptr():#x} vs {xt.data_ptr():#x}")
    b = gpu_sess.io_binding()
    b.bind_ortvalue_input("x", xv)
    b.bind_output("y", "cuda", 0)
    torch.cuda.synchronize()
    gpu_sess.run_with_iobinding(b)
    yv = b.get_outputs()[0]
    yt = torch.from_dlpack(yv)
    check("DLPack out: same address", yt.data_ptr() == yv.data_ptr() and yt.is_cuda,
          f"{yt.data_ptr():#x} vs {yv.data_ptr():#x}")
    diff = float((yt - ref(xt)).abs().max() / ref(xt).abs().max())
    check("device output equals torch", diff < 1e-5, f"{diff:.2e}")
    out_buf = torch.empty((8, 64), device="cuda")
    b2 = gpu_sess.io_binding()
    b2.bind_ortvalue_input("x", xv)
    b2.bind_ortvalue_output("y", onyx.OrtValue.from_dlpack(out_buf))
    gpu_sess.run_with_iobinding(b2)
    diff = float((out_buf - ref(xt)).abs().max() / ref(xt).abs().max())
    check("output written into a bound torch buffer", diff < 1e-5 and b2.get_outputs()[0].data_ptr() == out_buf.data_ptr(),
          f"{diff:.2e}")

    # 4. captured replays through IO binding, inputs rewritten in place before each run
    cap = onyx.InferenceSession(path, providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
    xin = torch.empty((4, 64), device="cuda")
    yout = torch.empty((4, 64), device="cuda")
    bind = cap.io_binding()
    bind.bind_ortvalue_input("x", onyx.OrtValue.from_dlpack(xin))
    bind.bind_ortvalue_output("y", onyx.OrtValue.from_dlpack(yout))
    steps, worst = 200, 0.0
    for i in range(steps):
        xin.copy_(torch.randn((4, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(i)))
        torch.cuda.synchronize()
        cap.run_with_iobinding(bind)
        want = ref(xin)
        worst = max(worst, float((yout - want).abs().max() / want.abs().max()))
    rep = cap.capture_report()
    check("captured replays through run_with_iobinding", rep["replays"] >= steps - 2 and worst < 1e-5,
          f"{rep['captures']} captures, {rep['replays']} replays, {rep['eager_runs']} eager of {steps} runs; "
          f"worst relative difference {worst:.2e}")

    # 5. generation on the GPU against the CPU
    folder = f"{fixtures}/llama-builder-fp32"
    tokens = {}
    for dev in ("cpu", "cuda:0"):
        model = og.Model(folder, device=dev)
        tok = og.Tokenizer(model)
        params = og.GeneratorParams(model)
        ids = tok.encode("The quick brown fox", add_special_tokens=True)
        params.set_search_options(max_length=len(ids) + 40)
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        while not gen.is_done():
            gen.generate_next_token()
        tokens[dev] = gen.get_sequence(0).tolist()
        if dev != "cpu":
            cr = model.capture_report()
    check("onyx.genai on cuda:0 generates the cpu's tokens", tokens["cpu"] == tokens["cuda:0"],
          f"{len(tokens['cpu'])} tokens; decode steps captured {cr['captures']}, replayed {cr['replays']}")

    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
