"""A vision encoder at two image sizes: its outputs equal onnxruntime's, and its planned memory
(the arena that holds every intermediate at its planned offset) is at most a tenth of the sum of
all its node outputs -- the case of a vision encoder that held all 2545 of its node outputs at
once (23 GB at 448 px), in miniature: 12 layers, the ratio printed for each size.
"""

import numpy as np
import pytest

import gen_models
from test_parity import fresh_rng, run_and_compare

VIT = dict(hidden=96, heads=3, ffn=384, layers=12, patch=16, max_side=448)


@pytest.fixture(scope="module")
def vit_model(tmp_path_factory):
    import onnx

    path = tmp_path_factory.mktemp("vit") / "vit_encoder.onnx"
    onnx.save(gen_models.make_vit_encoder(VIT), str(path))
    return path


@pytest.mark.parametrize("side", [224, 448])
def test_vision_encoder_matches_onnxruntime(side, vit_model, run_onyx, tmp_path):
    rng, _seed = fresh_rng()
    feeds = {"pixel_values": rng.standard_normal((1, 3, side, side)).astype(np.float32)}
    run_and_compare(vit_model, feeds, run_onyx, tmp_path, label=f"vit {side}x{side}")


@pytest.mark.parametrize("side", [224, 448])
def test_vision_encoder_plans_a_tenth_of_its_node_outputs(side, vit_model, run_onyx):
    import json

    proc = run_onyx("plan", vit_model, "--dim", "batch=1", "--dim", f"height={side}", "--dim", f"width={side}",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    arena, every = plan["arena_bytes"], plan["no_reuse_bytes"]
    ratio = arena / every
    print(f"vit {side}x{side}: arena {arena} B, all node outputs {every} B, ratio {ratio:.4f}, "
          f"live-set lower bound {plan['lower_bound_bytes']} B")
    assert every > 0 and ratio <= 0.1, f"arena {arena} B is more than a tenth of the {every} B of node outputs"
    assert arena <= 1.05 * plan["lower_bound_bytes"]
