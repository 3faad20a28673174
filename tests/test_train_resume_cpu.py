"""A resumed multi-process CPU run loads its optimizer state: transformers maps it to ``args.device``,
which accelerate names ``cpu:0`` on every CPU rank."""

from __future__ import annotations

import torch

import balagg.train.trainer  # noqa: F401  (registers the restore for cpu:N locations)


def test_an_optimizer_state_loads_onto_an_indexed_cpu_device(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    torch.save(optimizer.state_dict(), tmp_path / "optimizer.pt")
    # what Trainer._load_optimizer_and_scheduler does when world_size > 1 and the device is cpu:0
    state = torch.load(tmp_path / "optimizer.pt", map_location=torch.device("cpu", 0), weights_only=True)
    restored = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters())
    restored.load_state_dict(state)
    assert torch.equal(restored.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert restored.state_dict()["state"][0]["exp_avg"].device.type == "cpu"
