"""Reading a node's link rate: the interface, sysfs speed, a tc rate limit, and the job's slowest link."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from dlbench.engine.comm import with_link_fraction
from dlbench.engine.link import job_link, link_interface, sysfs_rate_bits_per_s, tc_rate_bits_per_s


def test_the_interface_the_library_is_told_to_use_wins():
    assert link_interface({"NCCL_SOCKET_IFNAME": "ib0,eth0"}) == "ib0"
    assert link_interface({"GLOO_SOCKET_IFNAME": "^docker0,eth1"}) == "eth1"  # ^: an exclusion, not a choice
    assert link_interface({"NCCL_SOCKET_IFNAME": "=eth2"}) == "eth2"  # '=': an exact name
    assert link_interface({}, hostname="localhost") is None  # loopback is no link


def test_sysfs_speed_in_megabits(tmp_path):
    (tmp_path / "eth0").mkdir()
    (tmp_path / "eth0" / "speed").write_text("25000\n")
    (tmp_path / "veth1").mkdir()
    (tmp_path / "veth1" / "speed").write_text("-1\n")  # what virtual interfaces without a speed say
    assert sysfs_rate_bits_per_s("eth0", tmp_path) == 25e9
    assert sysfs_rate_bits_per_s("veth1", tmp_path) is None and sysfs_rate_bits_per_s("none", tmp_path) is None


def test_tc_json_gives_the_lowest_tbf_rate():
    out = ('[{"kind":"tbf","handle":"1:","root":true,"options":{"rate":12500000,"burst":32768}},'
           '{"kind":"netem","handle":"10:","parent":"1:1","options":{"limit":1000}}]')
    assert tc_rate_bits_per_s(out) == 100e6
    assert tc_rate_bits_per_s('[{"kind":"noqueue","options":{}}]') is None
    assert tc_rate_bits_per_s("") is None and tc_rate_bits_per_s("not json") is None


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("tc") is None or shutil.which("unshare") is None,
                    reason="needs root, tc and unshare (a network namespace of its own)")
def test_a_real_shaped_link_is_read_in_its_own_namespace():
    """In a network namespace of its own (nothing on the host changes): a veth pair, one end shaped to
    100 Mbit/s with tbf; the veth's nominal speed (10 Gbit/s) is read through the namespace, not sysfs."""
    code = ("import json; from dlbench.engine.link import local_link; "
            "print(json.dumps([local_link({'GLOO_SOCKET_IFNAME': n}) for n in ('v0', 'v1')]))")
    script = ("ip link add v0 type veth peer name v1 && ip link set v0 up && ip link set v1 up && "
              "tc qdisc add dev v0 root tbf rate 100mbit burst 32kb latency 50ms && "
              f"{sys.executable} -c \"{code}\"")
    out = subprocess.run(["unshare", "--net", "sh", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0 and "Operation not permitted" in out.stderr:
        pytest.skip(f"cannot make a network namespace here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    shaped, plain = json.loads(out.stdout)
    assert (shaped["rate_bits_per_s"], shaped["source"]) == (100e6, "tc tbf on v0")
    assert (plain["rate_bits_per_s"], plain["source"]) == (10e9, "speed of v1")


def test_the_job_link_is_the_slowest_node_and_none_on_one_host():
    a = {"host": "node1", "interface": "eth0", "rate_bits_per_s": 1e9, "source": "/sys/class/net/eth0/speed"}
    b = {"host": "node2", "interface": "eth0", "rate_bits_per_s": 1e8, "source": "tc tbf on eth0"}
    link = job_link([a, a, b], None)
    assert link["rate_bits_per_s"] == 1e8 and link["source"] == "tc tbf on eth0 of node2"
    assert link["hosts"] == ["node1", "node2"] and link["interfaces"] == ["node1:eth0", "node2:eth0"]
    assert job_link([a, a], None) is None  # one host: the ranks' traffic crosses no link
    assert job_link([a, a], 4e8)["source"] == "--link-rate"
    unknown = job_link([a | {"rate_bits_per_s": None}, b | {"rate_bits_per_s": None}], None)
    assert unknown["rate_bits_per_s"] is None and unknown["hosts"] == ["node1", "node2"]


def test_busbw_as_a_fraction_of_the_link():
    rows = [{"busbw_bytes_per_s": 11.25e6}, {"busbw_bytes_per_s": 6e6}]
    assert [r["link_fraction"] for r in with_link_fraction(rows, {"rate_bits_per_s": 100e6})] == [0.9, 0.48]
    assert [r["link_fraction"] for r in with_link_fraction(rows, None)] == [None, None]
