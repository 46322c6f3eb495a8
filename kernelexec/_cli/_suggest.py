"""An argument parser that names the nearest option or command when one is mistyped.

``kernelexec serve --prot 9000`` says ``did you mean --port?`` under ``serve``'s
usage, and ``kernelexec serv`` says ``did you mean serve?``; both exit 2, as
argparse does for any usage error. Python 3.14's ``suggest_on_error`` does the
second only, and kernelexec runs on 3.10.

It also takes a token that begins with ``-`` as the value it is: one URL-safe
token in 64 does (``secrets.token_urlsafe``, which the docs suggest), and
argparse reads ``--token -abc`` as an option with its value missing.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["Parser"]

# Where a subcommand's parser leaves itself in the namespace, so that an
# unknown option is reported under the command it was given to.
_OWNER = "_kernelexec_parser"
# Options whose value is an opaque secret, which may begin with "-".
_OPAQUE = frozenset({"--token", "--lab-token"})


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser``, with suggestions; its subcommands' parsers are ones too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(**{_OWNER: self})

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        words = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(_opaque_values(words, _options(self)), namespace)
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


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and its subcommands' parsers."""
    found = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def _opaque_values(words: list[str], options: set[str]) -> list[str]:
    """``--token -abc`` as ``--token=-abc``: the word after an opaque option is its value,
    unless it is one of ``options`` (``--token --port 0``: the token left out)."""
    joined: list[str] = []
    rest = iter(words)
    for word in rest:
        if word == "--":
            joined += [word, *rest]
            break
        following = next(rest, None) if word in _OPAQUE else None
        if following is None:
            joined.append(word)
        elif following.startswith("-") and following.split("=", 1)[0] not in options:
            joined.append(f"{word}={following}")
        else:
            joined += [word, following]
    return joined
