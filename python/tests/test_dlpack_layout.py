"""A DLPack export is the exporter's word about its memory: one that lies about its strides is
refused naming the tensor before a byte is read (it used to crash the trainer or send bytes from
outside the buffer), while torch's own strided views, which stay inside their storage, still
send."""

import ctypes

import numpy as np
import pytest
import torch

import wt
from conftest import xxh3


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Lying:
    """An object whose __dlpack__ hands out a real numpy capsule with its shape and strides
    rewritten: what a buggy or hostile exporter can do."""

    def __init__(self, shape, strides, byte_offset=0):
        self.array = np.arange(16, dtype=np.float32)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides is not None else None
        self.byte_offset = byte_offset

    def __dlpack__(self, stream=None):
        capsule = self.array.__dlpack__()
        m = DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
        m.dl_tensor.ndim = len(self.shape)
        m.dl_tensor.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.strides = (ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
                               if self.strides is not None else None)
        m.dl_tensor.byte_offset = self.byte_offset
        return capsule


@pytest.mark.parametrize("shape,strides,why", [
    ((4, 4), (1 << 40, 1), r"its strides span 3298534883332 elements while its shape holds 16"),
    ((16,), (-1,), r"dimension 0 has stride -1 \(negative strides are not read\)"),
    ((4, 4), (8, 1), r"its strides span 28 elements while its shape holds 16"),
    ((1 << 40, 1 << 40), None, r"its element count overflows"),
    ((4, -4), None, r"dimension 1 has size -4"),
    ((2, 1 << 40), (1 << 62, 1 << 30), r"dimension 1.s stride 1073741824 overflows"),
])
def test_a_capsule_that_lies_about_its_layout_is_refused_naming_the_tensor(shape, strides, why):
    source = {"ok": torch.zeros(4), "liar": Lying(shape, strides)}
    with pytest.raises(wt.InvalidArgument,
                       match=r"tensor 'liar' of the source has an impossible DLPack layout: " +
                       f"(?:{why})"):
        wt.trainer_init({"backend": "ipc"}, client=wt.Receiver("ipc"), source=source)


def test_a_lying_capsule_in_a_delta_is_refused_too():
    with pytest.raises(wt.InvalidArgument, match=r"tensor 'w' of `after` has an impossible "
                                                 r"DLPack layout: dimension 0 has stride -1"):
        wt.make_delta({"w": np.zeros(16, dtype=np.float32)}, {"w": Lying((16,), (-1,))})


def test_an_honest_capsule_and_torch_strided_views_still_send(serve):
    url = serve("ipc")
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    source = {"transposed": base.t(), "every_other": base[:, ::2], "honest": Lying((4, 4), (4, 1)),
              "broadcast": torch.ones(1, 4).expand(3, 4)}
    engine = wt.trainer_init({"backend": "ipc"}, client=url, source=source)
    engine.send_weights(weight_version="v")
    sums = wt.HttpClient(url).weight_checksums()
    assert sums["transposed"] == xxh3(base.t().contiguous())
    assert sums["every_other"] == xxh3(base[:, ::2].contiguous())
    assert sums["honest"] == xxh3(torch.arange(16, dtype=torch.float32).reshape(4, 4))
    assert sums["broadcast"] == xxh3(torch.ones(3, 4))
    engine.close()


def test_a_strided_numpy_view_is_refused_with_what_to_pass():
    array = np.arange(32, dtype=np.float32).reshape(4, 8)[:, ::2]
    with pytest.raises(wt.InvalidArgument, match=r"tensor 'w' of the source has an impossible "
                                                 r"DLPack layout: .*pass a contiguous copy"):
        wt.trainer_init({"backend": "ipc"}, client=wt.Receiver("ipc"), source={"w": array})
