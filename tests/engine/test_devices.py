"""Where the engine runs (``tailtheory.engine.devices``): ``auto``, ``cpu``, ``cuda``, and a
clear error for anything else or for ``cuda`` without a GPU."""

import pytest
import torch


def test_devices():
    from tailtheory.engine.devices import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="valid devices: auto, cpu, cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")


def test_model_generator_is_on_the_models_device_with_the_plain_stream():
    import torch

    from tailtheory.engine.devices import model_generator

    model = torch.nn.Linear(3, 2)
    g = model_generator(model, 7)
    assert g.device == next(model.parameters()).device
    assert torch.equal(torch.rand(5, generator=g),
                       torch.rand(5, generator=torch.Generator().manual_seed(7)))
