"""A job function's signature, read once: ``inspect.signature`` rebuilds it on every
call and cost more than the argument check it serves (``check_arguments`` on every
enqueue, a limit's key from an argument)."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

_READ: weakref.WeakKeyDictionary[Callable[..., Any], inspect.Signature] = (
    weakref.WeakKeyDictionary()
)


def signature_of(fn: Callable[..., Any]) -> inspect.Signature:
    """``inspect.signature(fn)``, kept while ``fn`` lives; raises as it does
    (``TypeError``, ``ValueError``) for a callable without a readable signature."""
    try:
        return _READ[fn]
    except KeyError:
        pass
    except TypeError:  # not weakly referable (a builtin): read every time
        return inspect.signature(fn)
    signature = _READ[fn] = inspect.signature(fn)
    return signature
