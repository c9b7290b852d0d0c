"""The one exception type of onyx."""


class Error(RuntimeError):
    """An error from onyx. The message is the whole context chain, outermost first
    ("loading 'm.onnx': graph 'g': node 'n' (Concat): ..."); `chain` holds its parts."""

    def __init__(self, message, chain=None):
        super().__init__(message)
        self.chain = list(chain) if chain is not None else [message]
