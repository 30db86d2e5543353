"""gangmesh plan with NVLink domains and racks: --hosts-per-domain, --domains-per-rack."""

from __future__ import annotations

import json

from gangmesh.tools.cli import main

EP_ACROSS_DOMAINS = ["plan", "--world-size", "1152", "--pp", "2", "--ep", "16", "--tp", "4",
                     "--etp", "4", "--ranks-per-node", "4", "--hosts-per-domain", "18"]  # fmt: skip


def test_domains_are_checked_and_the_advice_fixes_the_finding(capsys):
    assert main(EP_ACROSS_DOMAINS) == 0
    out = capsys.readouterr().out
    assert "locality (domains of 72 ranks):\n" in out
    assert (
        "  - to fix: ep: 56 of 72 groups span domains, e.g. [64, 68, 72, 76, 80, 84, 88, 92, "
        "... (16 ranks)] on domains [0, 1]; ep=16 fits in a domain of 72 ranks, but its "
        "64-rank blocks are not aligned to domains; use ep=18\n"
    ) in out
    assert main([*EP_ACROSS_DOMAINS, "--strict"]) == 1
    assert capsys.readouterr().err.endswith("locality findings to fix: ep (domain)\n")
    fixed = [*EP_ACROSS_DOMAINS, "--strict"]
    fixed[fixed.index("16")] = "18"
    assert main(fixed) == 0
    assert "no checked gang crosses a domain or a rack" in capsys.readouterr().out


def test_racks_and_json(capsys):
    args = ["plan", "--world-size", "64", "--ep", "32", "--ranks-per-node", "4",
            "--hosts-per-domain", "2", "--domains-per-rack", "2", "--format", "json",
            "--json-content", "counts"]  # fmt: skip
    assert main(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["hosts_per_domain"], document["domains_per_rack"]) == (2, 2)
    levels = [(f["dim"], f.get("level", "node")) for f in document["locality_findings"]]
    assert levels == [("ep", "node"), ("ep", "domain"), ("ep", "rack")]


def test_domains_need_nodes_and_racks_need_domains(capsys):
    assert main(["plan", "--world-size", "8", "--hosts-per-domain", "2"]) == 2
    assert "--hosts-per-domain: domains hold nodes, which needs --ranks-per-node" in (
        capsys.readouterr().err
    )
    args = ["plan", "--world-size", "8", "--ranks-per-node", "2", "--domains-per-rack", "2"]
    assert main(args) == 2
    assert "racks hold domains, which needs --hosts-per-domain" in capsys.readouterr().err
    args = ["plan", "--world-size", "8", "--ranks-per-node", "2", "--hosts-per-domain", "3"]
    assert main(args) == 2
    assert "--hosts-per-domain: expected domains of 6 ranks to divide --world-size 8" in (
        capsys.readouterr().err
    )
