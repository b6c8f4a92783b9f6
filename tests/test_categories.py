"""Category trees (tasks/categories.py): the formats the README advertises, and their errors."""

from __future__ import annotations

import os

import pytest

from tasks.categories import CategoryError, load_tree
from tests.fixtures.pages import REAL_PAGES, REQUIRE_ENV

NAVI_TREE = REAL_PAGES.parent / "codes" / "navi_code_tree.yml"


def write(tmp_path, name: str, text: str, encoding: str = "utf-8"):
    path = tmp_path / name
    path.write_text(text, encoding=encoding)
    return path


def test_a_yaml_tree_nests_by_dash_and_indent(tmp_path):
    path = write(
        tmp_path, "navi.yml", "A:\n- A001:\n  - A001_1\n  - A001_2:\n    - A001_21\n- A002\nB:\n"
    )
    tree = load_tree(str(path), "paper")
    assert tree.roots == ["A", "B"]
    assert tree.children("A") == ["A001", "A002"]
    assert tree.children("A001") == ["A001_1", "A001_2"]
    assert tree.children("A001_2") == ["A001_21"]
    assert tree.leaves("A") == ["A001_1", "A001_21", "A002"]
    assert tree.leaves("B") == ["B"]


def test_cnkis_real_navigation_tree_loads_every_code_once():
    if not NAVI_TREE.is_file():
        reason = f"{NAVI_TREE} is missing (../shared/cnki/codes)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    lines = [line for line in NAVI_TREE.read_text(encoding="utf-8").splitlines() if line.strip()]
    tree = load_tree(str(NAVI_TREE), "paper")
    roots = [line.rstrip(":") for line in lines if not line.startswith((" ", "-"))]
    assert tree.roots == roots and len(roots) >= 5
    assert len(tree.names) == len(lines)  # one code per line, none lost, none twice
    assert tree.children("A001_2") == ["A001_21", "A001_22"]
    for root in tree.roots:  # every leaf hangs under its root's code
        assert all(leaf.startswith(root) for leaf in tree.leaves(root))


def test_an_indented_text_tree_keeps_names_and_a_plain_list_makes_roots(tmp_path):
    text = "# a comment\nH04 电通信技术\n  H04L 数字信息的传输\n    H04L9 保密通信\n  H04N 图像通信\nG06 计算\n"
    tree = load_tree(str(write(tmp_path, "mine.txt", text)), "patent")
    assert tree.roots == ["H04", "G06"]
    assert tree.names["H04L"] == "数字信息的传输"
    assert tree.leaves("H04") == ["H04L9", "H04N"]
    plain = load_tree(str(write(tmp_path, "plain.txt", "TP3\n\nF0\nO1\n")), "paper")
    assert plain.roots == ["TP3", "F0", "O1"] and plain.children("TP3") == []


def test_a_file_notepad_saved_with_a_bom_and_a_relative_path_from_the_config_folder(tmp_path):
    write(tmp_path, "cats.txt", "G06\nH04\n", encoding="utf-8-sig")
    tree = load_tree("cats.txt", "patent", base_dir=tmp_path)
    assert tree.roots == ["G06", "H04"]


def test_rounds_walk_the_roots_in_file_order(tmp_path):
    tree = load_tree(str(write(tmp_path, "order.txt", "C\nA\nB\n")), "paper")
    walked, code = [], None
    while (code := tree.next_root(code)) is not None:
        walked.append(code)
    assert walked == ["C", "A", "B"]


def test_an_inline_list_takes_its_children_from_the_shipped_tree():
    tree = load_tree("H04,G06", "patent")
    assert tree.roots == ["H04", "G06"]
    assert tree.children("H04") and all(kid.startswith("H04") for kid in tree.children("H04"))
    assert load_tree("builtin", "patent").roots[0] == "A"  # IPC for patents
    assert load_tree("builtin", "paper").roots == load_tree("builtin:clc", "patent").roots


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("empty.txt", "# only a comment\n\n", "no category codes found"),
        ("twice.txt", "G06\nH04\nG06\n", "a root code appears twice"),
    ],
)
def test_a_bad_file_names_itself_and_the_problem(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(CategoryError, match=message) as caught:
        load_tree(str(path), "patent")
    assert str(path) in str(caught.value)


def test_a_missing_file_and_an_unknown_shipped_tree_say_so(tmp_path):
    with pytest.raises(CategoryError, match="cannot read category file .*nothere.txt"):
        load_tree(str(tmp_path / "nothere.txt"), "patent")
    with pytest.raises(CategoryError, match="no shipped category tree 'xyz'; shipped: clc, ipc"):
        load_tree("builtin:xyz", "patent")
