"""``dlbench image build``'s pure parts: the requirements it installs, the dependency layer's key, the Debian mirror
found in apt's sources (both formats), and the refusals that come before any build."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.api.image import build_image, checkout_root, debian_mirror, deps_key, requirements
from dlbench.errors import UsageError


def test_the_torch_requirement_replaces_pyprojects_and_torchvision_stays():
    reqs = requirements(checkout_root(), "torch==2.13.0+cpu")
    assert "torch==2.13.0+cpu" in reqs and not any(r.startswith("torch>") for r in reqs)
    assert any(r.startswith("torchvision") for r in reqs)


def test_the_dependency_layer_is_rebuilt_when_a_requirement_the_base_or_the_containerfile_changes():
    key = deps_key(["torch==2.13.0"], "sha256:a", "FROM x")
    assert key == deps_key(["torch==2.13.0"], "sha256:a", "FROM x")
    assert len({key, deps_key(["torch==2.14.1"], "sha256:a", "FROM x"), deps_key(["torch==2.13.0"], "sha256:b", "FROM x"),
                deps_key(["torch==2.13.0"], "sha256:a", "FROM y")}) == 4


def test_the_debian_mirror_comes_from_one_line_or_deb822_sources(tmp_path):
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb [arch=amd64] http://mirror.example.org/debian bookworm main\n")
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: https://deb.nodesource.com/node_20.x\n\nTypes: deb\nURIs: http://deb.debian.org/debian\n")
    assert debian_mirror([one_line]) == "http://mirror.example.org/debian"
    assert debian_mirror([tmp_path / "missing", deb822]) == "http://deb.debian.org/debian"
    with pytest.raises(UsageError, match="no Debian mirror found"):
        debian_mirror([tmp_path / "missing"])


@pytest.mark.parametrize("flag,value", [("tag", "--privileged"), ("base", "a b")])
def test_a_tag_or_base_that_is_no_image_reference_is_refused_before_any_build(flag, value):
    with pytest.raises(UsageError, match=f"--{flag} .* is refused"):
        build_image(**{flag: value})


def test_the_containerfile_ships_with_the_package_and_is_the_one_in_deploy():
    from dlbench.api.image import CONTAINERFILE

    assert CONTAINERFILE.read_text() == (checkout_root() / "deploy/container/Containerfile").read_text()
    assert "ARG BASE=localhost/dlbench-base:bookworm" in CONTAINERFILE.read_text() and Path(CONTAINERFILE).is_file()
