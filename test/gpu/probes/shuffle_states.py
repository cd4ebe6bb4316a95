"""Trained float state for the byte-plane (shuffle) measurement: a small
transformer trained a few hundred steps with AdamW on the GPU; writes its
weights (fp32 and bf16) and AdamW's two moments (fp32) as raw files into
DIR for shuffle.mjs.  Usage: python3 shuffle_states.py DIR [STEPS]"""
import os
import sys

import torch

out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
model = torch.nn.Sequential(torch.nn.Embedding(8192, 512), torch.nn.TransformerEncoder(layer, 6), torch.nn.Linear(512, 8192)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for _ in range(steps):
    x = torch.randint(0, 8192, (16, 128), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), torch.roll(x, 1, 1).flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
params = torch.cat([p.detach().flatten() for p in model.parameters()])
state = [opt.state[p] for p in model.parameters()]
files = {
    "weights_fp32": params,
    "weights_bf16": params.to(torch.bfloat16),
    "adam_m_fp32": torch.cat([s["exp_avg"].flatten() for s in state]),
    "adam_v_fp32": torch.cat([s["exp_avg_sq"].flatten() for s in state]),
}
os.makedirs(out, exist_ok=True)
for name, t in files.items():
    t.cpu().view(torch.uint8).numpy().tofile(os.path.join(out, name + ".bin"))
print(f"{params.numel()} parameters, loss {loss.item():.3f} after {steps} steps")
