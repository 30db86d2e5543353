"""fairseq2 0.8.1's own library with its gang module answered by gangmesh.compat.fairseq2:
it imports, its composition root wires the compat layer's context, and its sharded layers
and model hub run on gangmesh's gangs, found on gangmesh's one stack. In a process of its
own, where ``sys.modules["fairseq2.gang"]`` is the compat module before fairseq2 loads it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.dist.launch import REPO

pytest.importorskip("fairseq2", reason="fairseq2 is not installed")

SWAPPED = """
import json, sys
import torch
import gangmesh as gm
import gangmesh.compat.fairseq2 as compat

sys.modules["fairseq2.gang"] = compat  # fairseq2's library imports its gang module from here

from fairseq2 import init_fairseq2
from fairseq2.gang import GangContext
from fairseq2.models.llama import LLaMAConfig, get_llama_model_hub
from fairseq2.nn import BatchLayout, ColumnShardedLinear, Linear, RowShardedLinear, get_shard_dims
from torch.nn import Sequential

cpu = torch.device("cpu")
found = {"context": type(init_fairseq2().resolve(GangContext)).__qualname__}

# fairseq2's own sharded-layer test: rank 1 of 16 in tensor parallelism, FakeGangs
fake, tp = compat.FakeGang(cpu), compat.FakeGang(cpu, rank=1, size=16)
gangs = compat.Gangs(root=tp, dp=fake, rdp=fake, sdp=fake, tp=tp, pp=fake)
module = Sequential(
    Linear(32, 32, bias=True),
    ColumnShardedLinear(32, 32, bias=True, gangs=gangs, device=cpu),
    Linear(32, 32, bias=False),
    Sequential(RowShardedLinear(32, 32, bias=True, gangs=gangs, device=cpu)),
)
found["shard dims"] = get_shard_dims(module)

# a layer made without gangs takes the current ones: here gangmesh's own `with gangs:`
with gangs:
    found["in with gangs"] = list(ColumnShardedLinear(32, 64, bias=False).weight.shape)
found["outside"] = list(ColumnShardedLinear(32, 64, bias=False).weight.shape)

# the model hub shards a LLaMA over the gangs it is given (set_gangs(gangs, meta=True))
tp2 = compat.FakeGang(cpu, rank=1, size=2)
pair = compat.Gangs(root=tp2, dp=fake, rdp=fake, sdp=fake, tp=tp2, pp=fake)
config = LLaMAConfig(model_dim=16, max_seq_len=8, vocab_size=32, num_layers=1,
                     num_attn_heads=2, num_key_value_heads=2, ffn_inner_dim=32,
                     ffn_inner_dim_scale=1.0, ffn_inner_dim_multiple_of=1)
model = get_llama_model_hub().create_new_model(config, gangs=pair)
found["llama final projection"] = list(model.final_proj.weight.shape)
x = torch.zeros(2, 5, dtype=torch.int64)
found["llama logits"] = list(model(x, BatchLayout.of(x)).shape)
found["stack after"] = gm.maybe_get_current_gangs() is None
print(json.dumps(found))
"""


def test_fairseq2_s_library_runs_with_its_gang_module_answered_by_the_compat_layer():
    run = subprocess.run(
        [sys.executable, "-c", SWAPPED], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    assert found == {
        "context": "StandardGangContext",
        "shard dims": {"1.weight": 0, "1.bias": 0, "3.0.weight": 1},
        "in with gangs": [4, 32],  # 64 outputs over 16 ranks
        "outside": [64, 32],  # gangs of one process
        "llama final projection": [16, 16],  # 32 of the vocabulary over 2 ranks
        "llama logits": [2, 5, 32],  # gathered
        "stack after": True,
    }
