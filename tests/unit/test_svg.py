"""gangmesh plan --format svg: one panel per dimension, every group one labelled element."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.cli import main
from gangmesh.tools.render import same_groups, shown_dims

NS = {"s": "http://www.w3.org/2000/svg"}
HSDP = ["--world-size", "16", "--tp", "2", "--dp-replicate", "2"]
FSDP = ["--world-size", "16", "--tp", "2"]
CROSSING = ["--world-size", "12", "--tp", "4", "--ranks-per-node", "6"]
EXPERTS = [
    "--world-size",
    "16",
    "--dp-shard",
    "8",
    "--tp",
    "2",
    "--ep",
    "4",
    "--ranks-per-node",
    "8",
]


def draw(tmp_path, args):
    out = tmp_path / "plan.svg"
    assert main(["plan", *args, "--format", "svg", "--output", str(out)]) == 0
    return ET.fromstring(out.read_text())  # well-formed, or this raises


def panels(root):
    return {p.get("data-dim"): p for p in root.iterfind(".//s:g[@class='panel']", NS)}


def groups(panel):
    return panel.findall("s:g[@class='group']", NS)


def drawn_ranks(group):
    """The rank numbers written in a group's cells, in drawing order."""
    return [int(cell.findall("s:text", NS)[0].text) for cell in group.findall("s:g", NS)]


def texts(root):
    return [t.text or "" for t in root.iter(f"{{{NS['s']}}}text")]


def legend(root):
    """Each legend entry's text, its wrapped lines joined."""
    entries = root.iterfind("s:g[@class='legend']", NS)
    return [" ".join(t.text for t in entry.iterfind("s:text", NS)) for entry in entries]


def plan_of(args):
    options = dict(zip(args[::2], args[1::2], strict=True))
    sizes = {k[2:].replace("-", "_"): int(v) for k, v in options.items()}
    sizes.pop("ranks_per_node", None)
    return MeshTopology(sizes.pop("world_size"), **sizes)


@pytest.mark.parametrize(
    "args", [HSDP, FSDP, CROSSING, EXPERTS], ids=["hsdp", "fsdp", "cross", "ep"]
)
def test_each_dimension_has_a_panel_with_one_labelled_element_per_group(tmp_path, args):
    root = draw(tmp_path, args)
    plan = plan_of(args)
    expected = [d for d, s in plan.dims.items() if s > 1]
    if plan.uses_experts:  # a dense job's picture draws no expert dimension
        expected += [d for d in ("efsdp", "ep", "etp") if plan.size_of(d) > 1]
    twins = same_groups(plan, expected)  # drawn in the panel of the dimension they follow
    assert list(panels(root)) == [d for d in expected if d not in twins]
    for dim, panel in panels(root).items():
        drawn = groups(panel)
        assert [int(g.get("data-group")) for g in drawn] == list(range(len(plan.groups(dim))))
        for index, group in enumerate(drawn):
            members = plan.groups(dim)[index].tolist()
            assert drawn_ranks(group) == members, (dim, index)
            assert group.find("s:title", NS).text.startswith(f"{dim} group {index}: ranks ")
            labels = {cell.findall("s:text", NS)[1].text for cell in group.findall("s:g", NS)}
            assert labels == {f"g{index}"}
            for cell, rank in zip(group.findall("s:g", NS), members, strict=True):
                role = "stage" if dim == "pp" else "rank"
                where = f"{role} {plan.rank_in(rank, dim)} of {len(members)}"
                assert cell.find("s:title", NS).text == f"rank {rank}: {dim} group {index}, {where}"
        fills = [g.find("s:g/s:rect", NS).get("fill") for g in drawn]
        assert len(set(fills)) == len(fills), f"two {dim} groups share a colour"


def test_hsdp_and_fsdp_are_drawn_differently(tmp_path):
    hsdp, fsdp = panels(draw(tmp_path, HSDP)), panels(draw(tmp_path, FSDP))
    assert list(hsdp) == ["dp_replicate", "dp_shard", "tp"]
    assert list(fsdp) == ["dp_shard", "tp"]
    assert drawn_ranks(groups(hsdp["dp_shard"])[0]) == [0, 2, 4, 6]
    assert drawn_ranks(groups(fsdp["dp_shard"])[0]) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert drawn_ranks(groups(hsdp["dp_replicate"])[0]) == [0, 8]


def test_the_crossing_group_is_one_marked_group_with_the_finding_beside_it(tmp_path):
    root = draw(tmp_path, CROSSING)
    tp = panels(root)["tp"]
    crossing = [g for g in groups(tp) if g.get("data-crossing")]
    assert len(crossing) == 1
    (group,) = crossing
    assert drawn_ranks(group) == [4, 5, 6, 7] and group.get("data-crossing") == "to fix"
    assert "crosses nodes 0, 1" in group.find("s:title", NS).text
    assert len(group.findall("s:line", NS)) == 1, "one connector from node 0 to node 1"
    assert "to fix: tp: 1 of 3 groups span nodes, e.g. [4, 5," in " ".join(texts(tp))
    assert not [g for g in groups(panels(root)["dp_shard"]) if g.get("data-crossing")]
    assert "a group that crosses nodes (to fix; see under the panel)" in legend(root)
    assert "unavoidable" not in " ".join(texts(root))


def test_an_unavoidable_crossing_is_marked_as_such(tmp_path):
    args = ["--world-size", "64", "--dp-replicate", "2", "--dp-shard", "4", "--tp", "8",
            "--ranks-per-node", "8"]  # fmt: skip
    root = draw(tmp_path, args)
    marks = {g.get("data-crossing") for g in groups(panels(root)["dp_shard"])}
    assert marks == {"unavoidable"}
    assert not [g for g in groups(panels(root)["tp"]) if g.get("data-crossing")]
    assert any(t.startswith("unavoidable: dp_shard: 16 of 16 groups") for t in texts(root))


@pytest.mark.parametrize(("args", "rank"), [(HSDP, 5), (EXPERTS, 11), (CROSSING, 6)])
def test_rank_marks_exactly_its_groups_in_every_panel(tmp_path, args, rank):
    root = draw(tmp_path, [*args, "--rank", str(rank)])
    plan = plan_of(args)
    for dim, panel in panels(root).items():
        marked = [g for g in groups(panel) if g.get("data-rank") is not None]
        assert len(marked) == 1, dim
        assert marked[0].get("data-rank") == str(rank)
        assert drawn_ranks(marked[0]) == plan.group_of(rank, dim)
    bold = [t.text for t in root.iter(f"{{{NS['s']}}}text") if t.get("font-weight") == "bold"]
    assert bold.count(str(rank)) == len(panels(root)), "rank's own cell is bold in each panel"
    assert f"the groups of rank {rank}; a dot marks rank {rank} itself" in legend(root)


def test_rows_are_nodes_only_with_ranks_per_node(tmp_path):
    with_nodes, without = draw(tmp_path, CROSSING), draw(tmp_path, FSDP)
    assert {t for t in texts(with_nodes) if t.startswith("node ")} == {"node 0", "node 1"}
    assert not [t for t in texts(without) if t.startswith("node ")]
    assert "ranks 8-15" in texts(without)
    assert "rows: up to 8 consecutive ranks; --ranks-per-node draws nodes" in legend(without)
    assert "rows: one node of 6 ranks each" in legend(with_nodes)


def test_title_and_legend_name_every_size(tmp_path):
    root = draw(tmp_path, EXPERTS)
    all_text = texts(root)
    assert "16 ranks on 2 nodes of 8" in all_text
    assert "pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=2, ep=4, etp=1" in all_text
    assert "size 1, no panel: pp, dp_replicate, cp, etp" in legend(root)
    width = float(root.get("width"))
    for line in root.iterfind("s:text", NS):  # title, sizes, locality report
        needed = float(line.get("x")) + len(line.text) * float(line.get("font-size")) * 0.55
        assert width >= needed, f"no room for {line.text!r}"


def test_a_large_world_is_drawn_through_a_window_of_nodes(tmp_path):
    args = ["--world-size", str(2**20), "--pp", "8", "--tp", "8", "--ranks-per-node", "8"]
    root = draw(tmp_path, [*args, "--rank", "700000"])
    all_text = texts(root)
    window = "ranks 699968-700031 of 1048576 drawn; the pattern repeats, and each header counts"
    assert f"{window} all groups" in legend(root)
    assert "131072 groups of 8 ranks; 8 of them have ranks drawn here" in all_text
    tp = panels(root)["tp"]
    (marked,) = [g for g in groups(tp) if g.get("data-rank") == "700000"]
    assert drawn_ranks(marked) == list(range(700000, 700008))
    pp_titles = [g.find("s:title", NS).text for g in groups(panels(root)["pp"])]
    assert all(re.search(r"\(1 of 8 drawn\)", t) for t in pp_titles)


def test_a_single_rank_says_there_is_nothing_to_draw(tmp_path):
    root = draw(tmp_path, ["--world-size", "1"])
    assert not panels(root)
    assert "every dimension has size 1: one rank, no gangs" in texts(root)


def test_a_large_world_shows_which_nodes_each_stage_and_group_spans(tmp_path):
    args = ["--world-size", "1024", "--pp", "4", "--tp", "8", "--ranks-per-node", "8"]
    root = draw(tmp_path, args)
    (structure,) = root.iterfind(".//s:g[@class='overview']", NS)
    strips = {s.get("data-dim"): s for s in structure.iterfind("s:g[@class='strip']", NS)}
    assert set(strips) == {"pp", "dp_shard", "tp"}
    stages = [int(c.get("data-coordinate")) for c in strips["pp"].iterfind("s:g", NS)]
    assert stages == [node // 32 for node in range(128)], "a cell per node, its stage"
    tp = {int(c.get("data-coordinate")) for c in strips["tp"].iterfind("s:g", NS)}
    assert tp == {-1}, "every node holds all 8 tp ranks"
    words = " ".join(t.text or "" for t in structure.iter(f"{{{NS['s']}}}text"))
    assert "stage 0: nodes 0-31; stage 1: nodes 32-63" in words
    assert "dp_shard 0: nodes " in words, "a coordinate is named by its dimension"
    assert "rank 0: nodes" not in words, "a coordinate is not a global rank"
    assert "group 0 spans 4 nodes (0, 32, 64, 96)" in words
    assert "every group within one node (group 0 on node 0)" in words
    fills = [r.get("fill") for r in strips["pp"].iterfind("s:g/s:rect", NS)]
    assert len(set(fills)) == 4, "one colour per stage"


def test_a_world_drawn_whole_has_no_overview(tmp_path):
    assert not list(draw(tmp_path, HSDP).iterfind(".//s:g[@class='overview']", NS))


def test_group_colours_stay_distinct():
    from gangmesh.tools.svg_shapes import colour_of

    colours = [colour_of(group) for group in range(512)]
    assert len(set(colours)) == len(colours)


def test_dimensions_that_share_their_groups_are_drawn_once_with_every_name(tmp_path):
    # ep borrows the tp ranks (etp 1); efsdp, dp and edp are dp_shard: one communicator each
    root = draw(tmp_path, ["--world-size", "64", "--pp", "2", "--tp", "8", "--ep", "8"])
    said = {
        dim: " ".join(t.text or "" for t in panel.iter(f"{{{NS['s']}}}text"))
        for dim, panel in panels(root).items()
    }
    assert list(said) == ["pp", "dp_shard", "tp"]
    assert said["tp"].startswith("tp = ep: tensor parallel; expert parallel ")
    assert said["dp_shard"].startswith(
        "dp = dp_shard = efsdp = edp: data parallel; sharded data parallel; expert weight "
        "sharding; expert data parallel "
    )
    assert "the same groups for each name (one communicator each)" in said["tp"]
    assert "=" not in said["pp"] and "the same groups" not in said["pp"]


def test_a_moe_plan_names_every_dimension_of_a_panel_with_its_meaning(tmp_path):
    args = ["--world-size", "64", "--tp", "4", "--ep", "4", "--ranks-per-node", "8"]
    root = draw(tmp_path, args)
    said = {
        dim: " ".join(t.text or "" for t in panel.iter(f"{{{NS['s']}}}text"))
        for dim, panel in panels(root).items()
    }
    assert list(said) == ["dp_shard", "tp"]
    assert said["dp_shard"].startswith("dp = dp_shard = efsdp = edp: data parallel; ")
    assert said["tp"].startswith("tp = ep: tensor parallel; expert parallel ")
    plan = plan_of(args)
    named = {name for text in said.values() for name in text.split(":")[0].split(" = ")}
    assert named == {d for d in shown_dims(plan) if plan.size_of(d) > 1}, "every one, once"
