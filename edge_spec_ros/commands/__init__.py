"""The commands of ``edge-spec-ros`` (cli.py assembles them): each module registers its sub-commands with
lazily built options (``config_cli.LazyParser``) and runs them. A module here imports only the standard
library and ``config_cli`` at its top: what a command needs is imported when it runs, so the robot's
install shows ``edge-spec-ros --help`` without the cloud's or the benchmarks' modules."""
