"""A raw DLPack capsule behind the __dlpack__ protocol, for consumers (numpy) that want one."""


class CapsuleHolder:
    def __init__(self, capsule, device=(1, 0)):
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, stream=None):
        capsule, self._capsule = self._capsule, None
        return capsule

    def __dlpack_device__(self):
        return self._device
