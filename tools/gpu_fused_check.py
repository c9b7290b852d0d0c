"""On the GPU machine: the Optimum fixtures and the committed exports (and export_hf_decoders.py's
folders given after the repository root) through onyx.genai on cuda:0 (the CUDA defaults: the
fused path) against the CPU's tokens (and transformers' for the exports), with the kernels the
decode step ran (those on the CPU marked "(host)").

    python3 tools/gpu_fused_check.py REPO_ROOT [EXPORT_FOLDER...]"""
import glob, json, os, sys
import numpy as np
import onyx.genai as og
root = sys.argv[1]
bad = 0
def greedy(m, prompt, n):
    p = og.GeneratorParams(m); p.set_search_options(max_length=len(prompt) + n)
    g = og.Generator(m, p); g.append_tokens(np.array(prompt, np.int32)); out = []
    while not g.is_done():
        g.generate_next_token(); out.append(int(g.get_next_tokens()[0]))
    return out
folders = sorted(glob.glob(f"{root}/tests/fixtures/genai/*-optimum")) + sorted(glob.glob(f"{root}/tests/fixtures/exports/*/")) + sys.argv[2:]
for f in folders:
    f = f.rstrip("/")
    ref = json.load(open(f + "/reference.json")) if os.path.exists(f + "/reference.json") else None
    if ref is not None and "greedy" not in ref:  # the Optimum fixtures' own reference, not transformers' tokens
        ref = None
    prompts = ref["prompts"] if ref else [[5, 17, 33, 8], [60, 4, 99, 100, 101, 7, 8], [3]]
    cpu = og.Model(f)
    for cap in ("off", "require"):
        try:
            gpu = og.Model(f, device="cuda:0", capture=cap)
            same = 0
            for i, p in enumerate(prompts):
                n = len(ref["greedy"][i]) if ref else 16
                want = ref["greedy"][i] if ref else greedy(cpu, p, n)
                got = greedy(gpu, p, n)
                same += got == want
        except Exception as e:  # one folder's failure is reported, not fatal
            # A growing cache (Gemma's sliding-window layers) has no one signature to capture: asked
            # to capture every step, onyx refuses, as it should.
            expected = cap == "require" and cpu.cache_mode == "growing"
            bad += not expected
            print(f"{os.path.basename(f)} cuda:0 capture {cap}: {'refused, as a growing cache is' if expected else 'failed'}: "
                  f"{type(e).__name__}: {e}", flush=True)
            continue
        ok = same == len(prompts)
        bad += not ok
        print(f"{os.path.basename(f)} cuda:0 capture {cap}: {same}/{len(prompts)} prompts equal to {'transformers' if ref else 'the CPU'}; "
              f"cache {gpu.cache_mode}; RotaryCacheAttention {gpu._m.rotary_attention_nodes()}; "
              f"position tables {gpu._m.position_tables()['tables']}", flush=True)
        kernels = gpu._m.step_kernels()
        print(f"    decode step: {sum(kernels.values())} kernels: "
              + ", ".join(f"{k} {v}" for k, v in sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))), flush=True)
sys.exit(1 if bad else 0)
