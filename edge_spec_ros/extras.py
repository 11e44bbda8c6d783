"""The package's two installs and what each leaves out, checked where the other side's code begins.

``pip install edge_spec_ros[robot]`` is the robot: the nodes, the drafter and the messages (ROS 2 itself
comes from the robot's ROS install). ``pip install edge_spec_ros[cloud]`` is the verifier on a GPU
machine. Both need the core (``install_requires``: torch, which comes first and is the machine's own,
transformers, ZeroMQ, ...); ``all`` is both sides plus the benchmarks, training and plots of the
development environment. setup.py's ``extras_require`` lists the distributions, ``MODULES`` below what
they are imported as (test/packaging/test_installs.py keeps the two in step).

Code of one side that runs in the other's install fails with one line naming the extra to install
(``MissingExtra``), not a ModuleNotFoundError traceback: ``require`` imports an optional module,
``require_extra`` checks a whole extra before a command or a part of the package starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

DISTRIBUTION = "edge_spec_ros"
# extra -> the modules its distributions are imported as (setup.py: EXTRAS)
MODULES: dict[str, tuple[str, ...]] = {
    # the γ policy's Lambert W (spec/draft_length.py), camera frames and JPEG, bags and YAML
    "robot": ("scipy", "cv2", "yaml", "rosbags"),
    # the verifier's scale-out over Ray replicas (cloud/replicas.py)
    "cloud": ("ray",),
}
# ``all``: both sides, and the benchmarks' and training's plots and progress bars
MODULES["all"] = MODULES["robot"] + MODULES["cloud"] + ("matplotlib", "tqdm")


class MissingExtra(ImportError):
    """A module of an extra that this install does not have; the message is the one line to show."""


def install_hint(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def _message(what: str, extra: str) -> str:
    return f"{what} needs the {extra} extra: {install_hint(extra)}"


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package (``scipy`` of ``scipy.special``) is absent
        return True


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (none: the extra is installed)."""
    return [module for module in MODULES[extra] if _missing(module)]


def require(module: str, extra: str, what: str) -> ModuleType:
    """``import module``, or ``MissingExtra``: "<what> needs the <extra> extra: pip install ..." where the
    module is not installed. A module that is installed but fails to import raises as it is."""
    if _missing(module):
        _one_line_if_uncaught()
        raise MissingExtra(_message(what, extra))
    return importlib.import_module(module)


def require_extra(extra: str, what: str) -> None:
    """``MissingExtra`` unless every module of ``extra`` is installed (nothing is imported)."""
    absent = missing(extra)
    if absent:
        _one_line_if_uncaught()
        raise MissingExtra(f"{_message(what, extra)} (missing: {', '.join(absent)})")


def require_ros(what: str) -> None:
    """``MissingExtra`` unless rclpy can be imported: ROS 2 comes from the robot's ROS install (sourced),
    not from an extra."""
    if _missing("rclpy"):
        _one_line_if_uncaught()
        raise MissingExtra(f"{what} needs ROS 2 (rclpy): source the ROS 2 install first "
                           "(. /opt/ros/<distro>/setup.bash)")


def _one_line_if_uncaught() -> None:
    """A ``MissingExtra`` nobody catches (a node executable importing its module) ends the process with
    its one line on stderr and status 1, as a caught one does in ``edge-spec-ros``; every other
    exception is shown as before."""
    previous = sys.excepthook
    if getattr(previous, "missing_extra_hook", False):
        return

    def hook(kind, value, traceback) -> None:
        if isinstance(value, MissingExtra):
            print(f"error: {value}", file=sys.stderr)
        else:
            previous(kind, value, traceback)

    hook.missing_extra_hook = True
    sys.excepthook = hook
