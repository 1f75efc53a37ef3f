"""The errors wt raises: one class per C status code, each a subclass of :class:`wt.Error`.

The message is the C++ one, intact (field names included). ``code`` is the stable number of the
C ABI (``WT_ERR_*``), ``code_name`` its name, ``field`` the init-info key an error is about (or
``None``). Where a builtin means the same thing the class is also one: ``InvalidArgument`` is a
``ValueError``, ``Timeout`` a ``TimeoutError``, ``NotFound`` a ``LookupError``.
"""


class Error(Exception):
    """Base of every wt error."""

    code = 11
    code_name = "WT_ERR_INTERNAL"

    def __init__(self, message="", code=None, code_name=None, field=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        if code_name is not None:
            self.code_name = code_name
        self.field = field

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _kind(name, number, *bases, doc):
    cls = type(name, (Error,) + bases, {"code": number, "code_name": "WT_ERR_" + _upper(name),
                                        "__doc__": doc, "__module__": __name__})
    # OSError-based builtins take their arguments differently: keep Error's constructor.
    cls.__init__ = Error.__init__
    cls.__str__ = Error.__str__
    return cls


def _upper(name):
    out = ""
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out += "_"
        out += ch.upper()
    return out


InvalidArgument = _kind("InvalidArgument", 1, ValueError, doc="A bad value, naming the field.")
Incompatible = _kind("Incompatible", 2, doc="ABI version, capability or wire-format mismatch.")
Unsupported = _kind("Unsupported", 3, doc="Not built in, or not possible here (CUDA without a GPU).")
State = _kind("State", 4, doc="Called out of order (e.g. receive before start).")
System = _kind("System", 5, doc="An operating-system call failed (shared memory, sockets).")
Device = _kind("Device", 6, doc="A CUDA or NCCL call failed.")
Timeout = _kind("Timeout", 7, TimeoutError, doc="A deadline passed.")
Aborted = _kind("Aborted", 8, doc="abort() was called, or Ctrl-C interrupted the call.")
Remote = _kind("Remote", 9, doc="The other side (a client call, a peer) reported a failure.")
NotFound = _kind("NotFound", 10, LookupError, doc="A named thing (backend, tensor) does not exist.")
Internal = _kind("Internal", 11, doc="A bug, or an unexpected exception inside a plugin.")

_BY_CODE = {cls.code: cls for cls in (InvalidArgument, Incompatible, Unsupported, State, System,
                                      Device, Timeout, Aborted, Remote, NotFound, Internal)}


def _make(code, code_name, message, field):
    """Called by the extension module: the exception object for a C++ wt::Error."""
    cls = _BY_CODE.get(code, Error)
    return cls(message, code=code, code_name=code_name, field=field or None)


__all__ = ["Error"] + [cls.__name__ for cls in _BY_CODE.values()]
