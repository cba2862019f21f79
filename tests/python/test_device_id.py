"""A tensor on a negative device id names no device: caibridge refuses it
from every source as it refuses the id as an argument (ValueError naming
device_id), and runs the tensor's deleter once."""
import pytest

import caibridge
from conftest import FakeTensor, collect, filled
from test_exchange_api import ForeignTable


def test_argument_is_refused():
    with pytest.raises(ValueError, match=r"device_id = -1 is out of range"):
        caibridge.as_dlpack(bytearray(4), device=(2, -1))


def test_foreign_table_tensor_is_refused():
    foreign = ForeignTable(device=(2, -1))
    with pytest.raises(ValueError, match=r"device_id = -1 is out of range"):
        caibridge.from_dlpack(foreign.producer_type(filled((2,), "float32")))
    collect()
    assert len(foreign.tensors) == 1
    assert foreign.tensors[0].calls == 1, "the refused tensor was deleted once"


@pytest.mark.parametrize("versioned", [True, False])
@pytest.mark.parametrize("device", [(2, -1), (1, -7), (13, -2**31)])
def test_capsule_tensor_is_refused(versioned, device):
    fake = FakeTensor(filled((3,), "int16"), versioned=versioned,
                      device=device)
    with pytest.raises(ValueError, match=r"device_id = -\d+ is out of range"):
        caibridge.from_dlpack(fake.capsule())
    collect()
    assert fake.calls == 1


def test_device_zero_still_taken():
    foreign = ForeignTable(device=(2, 0))
    view = caibridge.from_dlpack(foreign.producer_type(filled((2,), "int8")))
    assert view.__dlpack_device__() == (caibridge.kDLCUDA, 0)
