"""The grader's clean-up of folders sandboxed code wrote in (``sandbox/cleanup.py``): however
deep the folders, links left alone; its control: ``shutil.rmtree`` gives up on the same chain
(the hostile ``deep_folders_left_behind`` made ``grade`` raise that way, and stay on disk)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from autograder.sandbox.cleanup import remove_tree

DEPTH = 1500  # past Python's recursion limit, as a notebook's kernel made it


def chain(top: Path, depth: int = DEPTH) -> Path:
    top.mkdir()
    here = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=here)
        inner = os.open("d", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = inner
    with open(os.open("last", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here), "w") as f:
        f.write("x")
    os.close(here)
    return top


def test_a_chain_deeper_than_the_recursion_limit_is_removed_and_a_link_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    top = chain(tmp_path / "work")
    (top / "link").symlink_to(outside)
    remove_tree(top)
    assert not top.exists() and (outside / "keep").read_text() == "mine"


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="shutil.rmtree recurses once a level up to 3.12")
def test_control_shutil_rmtree_gives_up_on_the_same_chain(tmp_path):
    top = chain(tmp_path / "work")
    with pytest.raises(RecursionError):
        shutil.rmtree(top, ignore_errors=True)
    assert top.exists()
    remove_tree(top)
