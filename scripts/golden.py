"""Shared by the PyTorch references: the gradient and AdamW runs on a set of
HF-named float64 parameters, and the golden HDF5 file titan's tests read
(layout documented in scripts/qwen3_reference.py)."""
import json

import h5py
import numpy as np
import torch


def random_params(shapes, gen):
    """Float32-exact float64 weights in shape order: norm weights 1 + 0.1 N(0, 1), the rest 0.2 N(0, 1)."""
    p = {}
    for name, shp in shapes.items():
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shp, generator=gen)
        else:
            t = 0.2 * torch.randn(shp, generator=gen)
        p[name] = t.to(torch.float32).to(torch.float64)  # exactly representable in float32
    return p


def adamw_run(train, tokens, hp, loss_of):
    """len(tokens) AdamW steps of the leaf tensors `train` (decay on matrices only, clip by global norm);
    loss_of(train, batch) -> the scalar loss. Returns the losses."""
    opt = torch.optim.AdamW([{"params": [v for v in train.values() if v.dim() >= 2], "weight_decay": hp["weight_decay"]},
                             {"params": [v for v in train.values() if v.dim() < 2], "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], foreach=False)
    losses = []
    for s in range(len(tokens)):
        opt.zero_grad()
        l = loss_of(train, tokens[s])
        l.backward()
        torch.nn.utils.clip_grad_norm_(list(train.values()), hp["max_norm"])
        opt.step()
        losses.append(l.item())
    return losses


def make_golden(out, cfg, params, tokens, loss_of, hp, buffers=None):
    """loss/grads of batch 0, then len(tokens) AdamW steps (decay on matrices only, clip by global norm).
    buffers: HF-named model state that is not trained (DeepSeek-V3's selection biases), written beside the
    parameters; loss_of reads them itself."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    loss = loss_of(leaves, cfg, tokens[0])
    loss.backward()
    train = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    losses = adamw_run(train, tokens, hp, lambda p, batch: loss_of(p, cfg, batch))
    with h5py.File(out, "w") as f:
        f.attrs["config"] = json.dumps(cfg)
        for k, v in list(params.items()) + list((buffers or {}).items()):
            f.create_dataset(k, data=v.numpy().astype(np.float32))
        f.create_dataset("inputs/tokens", data=tokens.numpy().astype(np.int64))
        f.create_dataset("ref/loss", data=np.array([loss.item()]))
        for k, v in leaves.items():
            f.create_dataset("ref/grads/" + k, data=v.grad.numpy())
        f.create_dataset("ref/adamw_losses", data=np.array(losses))
        for k, v in hp.items():
            f.attrs[k] = v
    print(f"wrote {out}: loss {loss.item():.6f}, adamw losses {losses[0]:.5f} -> {losses[-1]:.5f}")
