"""onyx: an inference engine for ONNX models on CPUs and NVIDIA GPUs.

`onyx.InferenceSession` is shaped like onnxruntime's (a script switches by its import);
`onyx.genai` like onnxruntime-genai's. Errors raise `onyx.Error` with onyx's whole
context chain. docs/python.md has the migration table."""

from ._errors import Error
from . import _onyx
from ._session import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
    OrtValue,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
)

__version__ = "0.1.0"


class RunOptions:
    """Per-run options, as onnxruntime's. `terminate = True` (from any thread) stops the runs
    given these options at their next node, with onyx.Error "run cancelled"; set it back to
    False to run again. onyx's own: `timeout_seconds` (0: none), the run's deadline, checked
    between nodes and between a Loop's iterations; `profile` (False), time each node of the run:
    InferenceSession.last_run_stats()["nodes"] lists them (node, op, seconds), in the order they
    ran. The logging fields are accepted and unused."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self.timeout_seconds = 0.0
        self.profile = False
        self._control = _onyx.RunControl()

    @property
    def terminate(self):
        return self._control.is_set

    @terminate.setter
    def terminate(self, value):
        self._control.set(bool(value))


def devices():
    """The devices this build can run on: "cpu", then "cuda:N" for each GPU present."""
    return _onyx.devices()


__all__ = ["Error", "InferenceSession", "SessionOptions", "RunOptions", "OrtValue", "IOBinding", "NodeArg",
           "ModelMetadata", "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "get_device",
           "get_available_providers", "get_all_providers", "devices", "__version__"]
