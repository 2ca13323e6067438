"""A whole Qwen3.5 checkpoint at released dims with random weights, for the gateway runs (image and video through the
vision stage and the thinker): transformers' `Qwen3_5[Moe]ForConditionalGeneration` with its own init, saved in
bf16 with the demo checkpoint's tokenizer, chat template and processor files (bench/thinker/lm_families.py says
why the demo tokenizer serves).

    python3 bench/thinker/qwen3_5_checkpoint.py --out /dev/shm/qwen3.5-9b            # on the GPU machine: ~18 GB
    python3 bench/thinker/qwen3_5_checkpoint.py --out /tmp/q35 --tiny                 # the demo dims (CPU)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.random_weights import write_random_weights  # noqa: E402
from bench.thinker.lm_families import FAMILIES  # noqa: E402
from runtime.checkpoint.qwen3_5.demo import write_tokenizer_files  # noqa: E402
from runtime.checkpoint.qwen3_5.demo_config import generation_config  # noqa: E402
from runtime.checkpoint.qwen3_5.processor_files import write_processor_files  # noqa: E402
from runtime.checkpoint.tokenizer_files import write_json  # noqa: E402


def write_random_qwen3_5(out_dir: Path, moe: bool, tiny: bool, device: torch.device,
                         dtype: torch.dtype = torch.bfloat16) -> dict:
    """Writes the checkpoint into `out_dir`; -> what was written (for a result file)."""
    import transformers

    t0 = time.perf_counter()
    family = FAMILIES["qwen3.5-35b-a3b" if moe else "qwen3.5-9b"](tiny)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "config.json", family.root)
    write_json(out_dir / "generation_config.json", generation_config())
    prefix = "Qwen3_5Moe" if moe else "Qwen3_5"
    params = write_random_weights(out_dir, getattr(transformers, f"{prefix}ForConditionalGeneration"),
                                  getattr(transformers, f"{prefix}Config"), device, dtype)
    write_tokenizer_files(out_dir)
    write_processor_files(out_dir)
    return {"dir": str(out_dir), "family": family.name, "parameters": params, "dtype": str(dtype),
            "weights": "transformers' own random init", "seconds": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--moe", action="store_true", help="35B-A3B instead of 9B")
    p.add_argument("--tiny", action="store_true", help="the demo checkpoint's dims (a CPU smoke run)")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    print(json.dumps(write_random_qwen3_5(args.out, args.moe, args.tiny, device, dtype)))


if __name__ == "__main__":
    main()
