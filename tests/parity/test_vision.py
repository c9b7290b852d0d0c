"""Vision-language generation on the committed fixture (tests/fixtures/vision/llava-genai, made by
tools/make_vision_fixture.py): a tiny random-weight LLaVA in onnxruntime-genai's multi-model folder
form (vision.onnx, embedding.onnx, decoder.onnx), against what transformers computed on the model
before export (reference.json, reference_logits.npy; the preprocessing and a batch of every case
are checked by tests/unit/test_image.cpp).

  test_greedy_tokens   `onyx generate DIR --prompt TEXT --image FILE ... --json`: the prompt's ids
                       as LlavaProcessor expands them, and LlavaForConditionalGeneration.generate's
                       greedy tokens (one image, another image, two images, no image)
  test_logits          `--logits-out`: the first generated token's logits within 1e-4 of the largest
  test_memory_report   the vision model's weights and planned arena are reported
  test_float16_vision  the vision model in float16 before the float32 decoder: pixels and
                       features converted, the logits within 2e-3 of the largest, the tokens equal
  test_python          onyx.genai.Model(...).generate(prompt, images=[...]) (paths and arrays) and
                       preprocess_image against CLIPImageProcessor's pixels
  test_errors          misuse named: images to a text model, a prompt without image tokens, more
                       images than tokens, an unreadable image, --image with a batch
  test_serve_chat_with_images  `onyx serve`: chat messages with image_url data URLs give what
                       `onyx generate --image` gives, alone, concurrently and one after another
  test_serve_image_errors      a URL onyx would have to fetch, bad base64, bytes that are no image,
                       images without their tokens, images to a text model: 400s naming them
"""

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from test_serve import chat_folder, serve  # noqa: F401  (`serve` starts `onyx serve`)

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "vision" / "llava-genai"
TEXT_MODEL = REPO_ROOT / "tests" / "fixtures" / "genai" / "llama-optimum"


@lru_cache(maxsize=None)
def reference():
    return json.loads((FIXTURE / "reference.json").read_text())


def case_args(case):
    args = ["--prompt", case["prompt"]]
    for image in case["images"]:
        args += ["--image", FIXTURE / "images" / image]
    return args + ["--max-new-tokens", reference()["max_new_tokens"], "--greedy"]


def generate_json(run_onyx, *args):
    r = run_onyx("generate", FIXTURE, *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_greedy_tokens(run_onyx):
    ref = reference()
    wrong = []
    for case in ref["cases"]:
        out, _ = generate_json(run_onyx, *case_args(case))
        if (out["prompt_ids"], out["generated_ids"]) != (case["prompt_ids"], case["generated_ids"]):
            wrong.append(f"{case['name']}: onyx {out['prompt_ids']} -> {out['generated_ids']}\n"
                         f"   transformers {case['prompt_ids']} -> {case['generated_ids']}")
    assert not wrong, "\n".join(wrong)
    # The images steer the text: the same words with two different pictures go different ways.
    by = {c["name"]: c for c in ref["cases"]}
    assert by["one_image"]["generated_ids"] != by["other_image"]["generated_ids"]
    assert by["two_images"]["prompt_ids"].count(ref["image_token_id"]) == 2 * ref["tokens_per_image"]


def test_logits(run_onyx, tmp_path):
    ref = reference()
    want = np.load(FIXTURE / "reference_logits.npy")
    for k, case in enumerate(ref["cases"]):
        out = tmp_path / f"{case['name']}.npy"
        generate_json(run_onyx, *case_args(case), "--logits-out", out)
        got = np.load(out)[0]
        scale = np.abs(want[k]).max()
        assert np.abs(got - want[k]).max() <= 1e-4 * scale, (case["name"], np.abs(got - want[k]).max(), scale)


def test_memory_report(run_onyx):
    case = reference()["cases"][2]
    r = run_onyx("generate", FIXTURE, *case_args(case), "--memory-report")
    assert r.returncode == 0, r.stderr
    line = next((l for l in r.stderr.splitlines() if l.startswith("vision model: weights")), None)
    assert line is not None, r.stderr
    # Two images of 32 x 32 through a 3-layer tower: an arena was planned, within its live set's bound.
    assert "arena 0 B" not in line, line


def float16_copy(folder, dst):
    """The folder with its vision model in float16 (initializers, constants, inputs and outputs)."""
    import shutil

    import onnx
    from onnx import TensorProto, numpy_helper
    shutil.copytree(folder, dst)
    m = onnx.load(str(folder / "vision.onnx"))
    for init in m.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in m.graph.node:
        for a in n.attribute:
            if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    del m.graph.value_info[:]
    onnx.save(m, str(dst / "vision.onnx"))
    return dst


def test_float16_vision(run_onyx, tmp_path):
    ref = reference()
    folder = float16_copy(FIXTURE, tmp_path / "llava16")
    want = np.load(FIXTURE / "reference_logits.npy")
    for k, case in enumerate(ref["cases"]):
        logits = tmp_path / f"{case['name']}.npy"
        r = run_onyx("generate", folder, *case_args(case), "--logits-out", logits, "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["generated_ids"] == case["generated_ids"], case["name"]
        got = np.load(logits)[0]
        assert np.abs(got - want[k]).max() <= 2e-3 * np.abs(want[k]).max(), case["name"]


def python_api_checks(og):
    ref = reference()
    m = og.Model(str(FIXTURE))
    assert m.is_vision and not og.Model(str(TEXT_MODEL)).is_vision
    pixels = np.load(FIXTURE / "reference_pixels.npy")
    for k, name in enumerate(ref["images"]):
        got = m.preprocess_image(FIXTURE / "images" / name)
        assert got.shape == (3, 32, 32) and np.abs(got - pixels[k]).max() <= 1e-6, name
    by = {c["name"]: c for c in ref["cases"]}
    case = by["two_images"]
    g = m.generate(case["prompt"], max_new_tokens=ref["max_new_tokens"],
                   images=[FIXTURE / "images" / i for i in case["images"]])
    text = "".join(g)
    assert g.result["generated_ids"] == case["generated_ids"] and g.result["prompt_ids"] == case["prompt_ids"], g.result
    assert text == g.result["text"]
    # An image as an RGB array: the PNG's pixels, decoded here by the test's own reader.
    rgb = read_png_rgb(FIXTURE / "images" / by["one_image"]["images"][0])
    g = m.generate(by["one_image"]["prompt"], max_new_tokens=ref["max_new_tokens"], images=[rgb])
    list(g)
    assert g.result["generated_ids"] == by["one_image"]["generated_ids"]
    g = m.generate(by["text_only"]["prompt"], max_new_tokens=ref["max_new_tokens"])
    list(g)
    assert g.result["generated_ids"] == by["text_only"]["generated_ids"]
    for bad, words in ((lambda: m.generate("USER: <image> hi", images=[]), "image token"),
                       (lambda: og.Model(str(TEXT_MODEL)).generate("hi", images=[rgb]), "not a vision-language"),
                       (lambda: m.preprocess_image(np.zeros((4, 4), np.uint8)), "RGB uint8")):
        try:
            bad()
        except Exception as e:  # noqa: BLE001
            assert words in str(e), str(e)
        else:
            raise AssertionError(f"no error for {words}")


def read_png_rgb(path):
    """An 8-bit RGB PNG's pixels (zlib and the filters of the PNG specification; enough for the
    fixture's images, which PIL wrote)."""
    import struct
    import zlib
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, w = 8, b"", 0
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color == 2, (depth, color)
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    raw = zlib.decompress(idat)
    stride = w * 3
    out = np.zeros((h, stride), np.int32)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        prev = out[y - 1] if y else np.zeros(stride, np.int32)
        row = np.zeros(stride, np.int32)
        for x in range(stride):
            a = row[x - 3] if x >= 3 else 0
            b = prev[x]
            c = prev[x - 3] if x >= 3 else 0
            if f == 0:
                p = 0
            elif f == 1:
                p = a
            elif f == 2:
                p = b
            elif f == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            row[x] = (line[x] + p) & 255
        out[y] = row
    return out.astype(np.uint8).reshape(h, w, 3)


def test_python(run_python_checks):
    """onyx.genai on the vision fixture, in a process of its own (conftest's run_python_checks)."""
    run_python_checks("test_vision", "python_api_checks")


def test_errors(run_onyx, tmp_path):
    ref = reference()
    image = FIXTURE / "images" / ref["images"][0]

    def fails(folder, *args, words):
        r = run_onyx("generate", folder, *args)
        assert r.returncode != 0, r.stdout
        assert all(w in r.stderr for w in words), r.stderr

    fails(TEXT_MODEL, "--prompt", "hi", "--image", image, words=["not a vision-language model", "--image"])
    fails(FIXTURE, "--prompt", "USER: what is this?", "--image", image,
          words=["image tokens ('<image>')", "0 image tokens", "for 1 image"])
    fails(FIXTURE, "--prompt", "USER: <image>", "--image", image, "--image", image,
          words=["1 image token", "for 2 images"])
    missing = tmp_path / "missing.png"
    fails(FIXTURE, "--prompt", "USER: <image>", "--image", missing, words=[f"--image: image '{missing}': does not exist"])
    not_image = tmp_path / "note.png"
    not_image.write_text("hello")
    fails(FIXTURE, "--prompt", "USER: <image>", "--image", not_image, words=["not an image"])
    batch = tmp_path / "prompts.jsonl"
    batch.write_text('{"prompt": "USER: <image>"}\n{"prompt": "USER: <image>"}\n')
    fails(FIXTURE, "--prompts-file", batch, "--image", image, words=["--image goes with one prompt"])
    # A prompt with image tokens and no image: the prompt run would read features that are not there.
    fails(FIXTURE, "--prompt", "USER: <image> hi", words=["1 image token", "for 0 images"])


def data_url(path):
    import base64
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def chat_messages(case):
    """The case's prompt as a chat message: its text around an image_url part per image, which the
    fixture's template renders back to the case's prompt."""
    body = case["prompt"][len("USER: "):-len(" ASSISTANT:")]
    parts, images = [], iter(case["images"])
    for k, piece in enumerate(body.split("<image>")):
        if k:
            parts.append({"type": "image_url", "image_url": {"url": data_url(FIXTURE / "images" / next(images))}})
        if piece:
            parts.append({"type": "text", "text": piece})
    return [{"role": "user", "content": parts}]


def test_serve_chat_with_images(serve, run_onyx):
    """`onyx serve` on the vision fixture: chat messages with image_url parts (data URLs) give
    the text `onyx generate --image` gives (whose tokens test_greedy_tokens checks against
    transformers'), alone, two at once with different images, and one after another with the same
    text and another image (the prefix cache stops at the first image token); prompts are read in
    chunks of 7 tokens, so the image tokens straddle chunks."""
    import concurrent.futures
    ref = reference()
    by = {c["name"]: c for c in ref["cases"]}
    want = {name: generate_json(run_onyx, *case_args(c))[0] for name, c in by.items()}
    s = serve(FIXTURE, "--max-batch", 2, "--prefill-chunk", 7)

    def ask(name):
        return s.client.chat.completions.create(model=s.model, messages=chat_messages(by[name]),
                                                max_tokens=ref["max_new_tokens"], temperature=0)

    for name in ("one_image", "two_images", "text_only"):
        r = ask(name)
        assert r.choices[0].message.content == want[name]["text"], name
        assert r.usage.prompt_tokens == len(by[name]["prompt_ids"]), (name, r.usage)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(ask, ["one_image", "other_image"]))
    assert [g.choices[0].message.content for g in got] == [want["one_image"]["text"], want["other_image"]["text"]]
    first_image = by["other_image"]["prompt_ids"].index(ref["image_token_id"])
    for name in ("one_image", "other_image"):
        r = ask(name)
        assert r.choices[0].message.content == want[name]["text"], name
        assert r.usage.prompt_tokens_details.cached_tokens <= first_image, r.usage


def test_serve_image_errors(serve, tmp_path):
    s = serve(FIXTURE)
    png = data_url(FIXTURE / "images" / reference()["images"][0])

    json_type = {"Content-Type": "application/json"}

    def post(parts, model=None):
        return s.post("/v1/chat/completions", {"model": model or s.model, "max_tokens": 2,
                                               "messages": [{"role": "user", "content": parts}]}, json_type)

    def image(url):
        return {"type": "image_url", "image_url": {"url": url}}

    text = {"type": "text", "text": " hi"}
    for parts, words in (([image("https://example.com/cat.png"), text], "data URLs"),
                         ([image("data:image/png,abc"), text], "not base64"),
                         ([image("data:image/png;base64,@@@@"), text], "does not decode"),
                         ([image("data:image/png;base64,aGVsbG8="), text], "image 0 of the messages"),
                         ([{"type": "image_url"}, text], "image_url part"),
                         ([image(png), {"type": "text", "text": "<image> hi"}], "2 image tokens ('<image>') for 1 image")):
        code, body = post(parts)
        assert code == 400 and words in body, (words, code, body)
    # The server is still usable.
    code, body = post([image(png), {"type": "text", "text": "\nWhat is in the picture?"}])
    assert code == 200, body
    code, body = s.post("/v1/completions", {"model": s.model, "max_tokens": 2, "prompt": "USER: <image> hi"}, json_type)
    assert code == 400 and "1 image token ('<image>') for 0 images" in body, body
    # A text model refuses images.
    t = serve(chat_folder(tmp_path))
    code, body = t.post("/v1/chat/completions", {"model": t.model, "max_tokens": 2, "messages": [
        {"role": "user", "content": [image(png), text]}]}, json_type)
    assert code == 400 and "takes no images" in body, body
