"""docs/commands.md: every command of ``edge-spec-ros`` and its options, written from the parser.

``python -m edge_spec_ros.command_docs > docs/commands.md`` rewrites it; a test fails when the file
and the code differ (test/test_cli.py), as docs/parameters.md is kept with the nodes' configs.
"""

from __future__ import annotations

import os

from edge_spec_ros.cli import build_parser
from edge_spec_ros.config_cli import commands_markdown

INTRO = """# Commands

Generated from the command line's parser (`python -m edge_spec_ros.command_docs > docs/commands.md`; a test
keeps this file equal to the code). The options of `serve`, `bench`, `bringup`, `train-exits`,
`train-sim-pair` and `distill-drafter` are their config dataclasses' fields (`ServerConfig` and `Limits`,
`BenchConfig`, `BringupConfig`, `ExitTrainingConfig`, `SimPairConfig`, `DistillConfig`): description, range
and default come from the fields' metadata (`edge_spec_ros/config_cli.py`).
Each command needs its install (`pip install edge_spec_ros[robot]`, `[cloud]` or `[all]`: README); the
robot's nodes' ROS parameters are in [parameters.md](parameters.md).

## `make compare`: one decision, target-only beside speculative

`make compare` (`edge-spec-ros demo`) decodes one camera image + instruction in one process with
target-only autoregressive decoding and with speculative decoding, and prints both texts and a
statistics table:

```
instruction: find the silver bottle
[target-only] 'Reasoning: the silver bottle is not in view. Action: turn left 45 degrees'
[speculative] 'Reasoning: the silver bottle is not in view. Action: turn left 45 degrees'
outputs match (greedy: identical token for token)

                 target-only speculative
tokens                    21          21
rounds                    21           5
τ tokens/round          1.00        4.20
α acceptance            0.00        0.85
...
```

The two outputs are identical token for token under greedy decoding. The small models spend most of
their time in per-call Python overhead, so wall-clock ratios on them say nothing about real model
sizes. The verifier's `serve` and `keys`: [verifier.md](verifier.md); `bench`: [benchmarks.md](benchmarks.md);
`build-tokenizer` and `convert-smollm2`: [models.md](models.md)."""


def markdown() -> str:
    # argparse wraps nothing here (the tables are built from the actions), but a narrow COLUMNS must
    # not change a description's text either
    os.environ.setdefault("COLUMNS", "120")
    return commands_markdown(build_parser(), INTRO)


if __name__ == "__main__":
    print(markdown(), end="")
