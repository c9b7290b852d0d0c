"""Model metadata, providers, device.

Usage: ONYX_MIGRATION_MODELS=DIR python metadata.py RESULT.pkl
"""
import os
import pickle
import sys

import onnxruntime as ort

models = os.environ["ONYX_MIGRATION_MODELS"]
results = {}


def meta_dict(meta):
    return {
        "producer_name": meta.producer_name,
        "graph_name": meta.graph_name,
        "domain": meta.domain,
        "description": meta.description,
        "version": meta.version,
        "custom_metadata_map": dict(meta.custom_metadata_map),
    }


for name in ("mlp", "mixed"):
    sess = ort.InferenceSession(os.path.join(models, name + ".onnx"), providers=["CPUExecutionProvider"])
    results[name + "_meta"] = meta_dict(sess.get_modelmeta())
    results["providers_" + name] = sess.get_providers()
    results["providers_with_options_" + name] = sorted(sess.get_provider_options())

results["providers_available"] = ort.get_available_providers()
results["device"] = ort.get_device()

with open(sys.argv[1], "wb") as f:
    pickle.dump(results, f)
