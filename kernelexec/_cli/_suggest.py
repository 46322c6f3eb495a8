"""An argument parser that names the nearest option or command when one is mistyped.

``kernelexec serve --prot 9000`` says ``did you mean --port?`` under ``serve``'s
usage, and ``kernelexec serv`` says ``did you mean serve?``; both exit 2, as
argparse does for any usage error. Python 3.14's ``suggest_on_error`` does the
second only, and kernelexec runs on 3.10.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["Parser"]

# Where a subcommand's parser leaves itself in the namespace, so that an
# unknown option is reported under the command it was given to.
_OWNER = "_kernelexec_parser"


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser``, with suggestions; its subcommands' parsers are ones too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(**{_OWNER: self})

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # The innermost command's parser: its defaults are set last.
            owner: Parser = getattr(parsed, _OWNER, self)
            owner.unrecognized(extras)
        delattr(parsed, _OWNER)
        return parsed

    def unrecognized(self, extras: list[str]) -> NoReturn:
        message = f"unrecognized arguments: {' '.join(extras)}"
        options = [o for o in self._option_string_actions if o.startswith("--")]
        for word in extras:
            if not word.startswith("-"):
                continue
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean {close[0]}?"
                break
        self.error(message)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            names = [str(choice) for choice in choices]
            close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
            if close:
                raise argparse.ArgumentError(
                    action, f"invalid choice: {value!r}; did you mean {close[0]}?"
                )
        super()._check_value(action, value)
