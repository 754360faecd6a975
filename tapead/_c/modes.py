"""The per-thread modes (tapead.modes: no_grad, detect_anomaly): a mode
token, armed by C on entry and disarmed by C when it dies or is released.
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any

from . import ffi, lib
from .status import error

mode_leave = lib.ta_mode_leave


def mode_token() -> Any:
    """An unarmed mode token (csrc/api/cdef.h): ta_mode_leave runs when it dies."""
    return ffi.gc(ffi.new("ta_mode_tok *"), lib.ta_mode_leave)


def mode_enter(tok: Any, mode: int) -> None:
    """Arm tok with mode (1 no_grad, 2 detect_anomaly)."""
    st = lib.ta_mode_enter(tok, mode)
    if st < 0:
        raise error(st)
