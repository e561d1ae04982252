#!/usr/bin/env bash
# First look at a lent GPU machine: versions, GPU facts, the CuTe DSL sketches' check,
# and that the project imports there. Writes $OUT/env_probe.txt.
set -u
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda); p=torch.cuda.get_device_properties(0); print(p.name, p.multi_processor_count, 'SMs', p.total_memory>>20, 'MiB', 'L2', getattr(p,'L2_cache_size',0)>>20, 'MiB')"
  python3 -m pip list 2>/dev/null | grep -i -E "^(torch|triton|typer|rich|jinja2|numpy|pytest|pydantic|gitpython|safetensors|llguidance|nvidia-cutlass|apache-tvm)" 
  PYTHONPATH=$PWD python3 -c "import reference_impls, harness.compare; print('project imports ok', len(reference_impls.OP_NAMES), 'ops')"
  (cd .device/sketches && timeout 300 python3 gpu_check.py)
} 2>&1 | tee "$OUT/env_probe.txt"
