"""Placeholder during the split."""
from simmoe.validation.published._old import *  # noqa
from simmoe.validation.published._old import main, _command_line
