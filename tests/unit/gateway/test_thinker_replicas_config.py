"""thinker.replicas / devices / addresses and gateway.thinker_routing: checked with errors naming the field, and
what `omnimesh up` starts and hands the gateway for N replicas."""
from __future__ import annotations

import pytest

from gateway.cli.up import stage_processes, with_addresses
from runtime.config import ConfigError, MeshConfig, from_dict


def mesh(**sections: dict) -> MeshConfig:
    return from_dict(MeshConfig, sections)


@pytest.mark.parametrize(("thinker", "gateway", "message"), [
    ({"replicas": 2, "devices": ["cuda:0"]}, {}, "thinker.devices=('cuda:0',) is invalid: list one device per replica"),
    ({"devices": ["gpu"]}, {}, "'gpu' is not a device: use cpu, cuda or cuda:N"),
    ({"replicas": 0}, {}, "thinker.replicas"),
    ({"address": "a:1", "addresses": ["b:1"]}, {}, "set address (one target, or a headless Service's DNS name) or "
                                                   "addresses (a list), not both"),
    ({}, {"thinker_routing": "random"}, "gateway.thinker_routing='random' is invalid: use one of 'prefix_aware', "
                                        "'least_load', 'round_robin'"),
    ({}, {"thinker_routing_margin": -1}, "gateway.thinker_routing_margin"),
    ({}, {"thinker_resolve_s": 0}, "gateway.thinker_resolve_s"),
])
def test_bad_replica_and_routing_settings_name_the_field(thinker: dict, gateway: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        mesh(thinker=thinker, gateway=gateway)
    assert message in str(err.value)


def test_replicas_may_share_a_gpu_unless_split_over_several() -> None:
    assert mesh(thinker={"replicas": 2, "devices": ["cuda:0", "cuda:0"]}).thinker.replica_device(1) == "cuda:0"
    with pytest.raises(ConfigError, match="space the replicas' devices"):
        mesh(thinker={"replicas": 2, "devices": ["cuda:0", "cuda:1"], "tensor_parallel": 2})


def test_defaults_and_targets() -> None:
    m = mesh()
    assert (m.thinker.replicas, m.thinker.targets, m.gateway.thinker_routing) == (1, (), "prefix_aware")
    assert mesh(thinker={"address": "dns:///t:1"}).thinker.targets == ("dns:///t:1",)
    assert mesh(thinker={"addresses": ["a:1", "b:2"]}).thinker.targets == ("a:1", "b:2")


def test_up_starts_one_thinker_per_replica_on_its_device_and_lists_them_for_the_gateway() -> None:
    m = mesh(thinker={"replicas": 2, "devices": ["cuda:0", "cuda:1"]})
    specs = stage_processes(m, "thinker", "services.thinker", ["--config", "c"])
    assert [name for name, _, _ in specs] == ["thinker-0", "thinker-1"]
    assert [args[args.index("--device") + 1] for _, _, args in specs] == ["cuda:0", "cuda:1"]
    assert [args[args.index("--replica") + 1] for _, _, args in specs] == ["thinker-0", "thinker-1"]
    done = with_addresses(m, {"thinker": ["127.0.0.1:7", "127.0.0.1:5"], "vision": ["127.0.0.1:9"]})
    assert done.thinker.addresses == ("127.0.0.1:7", "127.0.0.1:5") and done.thinker.address == ""
    assert done.vision.address == "127.0.0.1:9"


def test_one_replica_keeps_the_single_address_and_the_stage_device() -> None:
    m = mesh(thinker={"device": "cuda:3"})
    ((name, _, args),) = stage_processes(m, "thinker", "services.thinker", [])
    assert name == "thinker" and args[args.index("--device") + 1] == "cuda:3"
    assert with_addresses(m, {"thinker": ["127.0.0.1:7"]}).thinker.address == "127.0.0.1:7"
    ((name, _, args),) = stage_processes(m, "talker", "services.talker", [])
    assert name == "talker" and "--device" not in args


def test_thinker_addr_flag_takes_a_list_of_replicas() -> None:
    import argparse

    from gateway.__main__ import with_flags

    flags = argparse.Namespace(**{f"{s}_addr": None for s in ("thinker", "vision", "audio", "talker")})
    flags.thinker_addr = "10.0.0.1:5,10.0.0.2:5"
    m = with_flags(mesh(thinker={"address": "old:1"}), flags, ())
    assert m.thinker.targets == ("10.0.0.1:5", "10.0.0.2:5") and m.thinker.address == ""
    flags.thinker_addr = "dns:///thinker-headless:50051"
    listed = mesh(thinker={"addresses": ["a:1", "b:1"]})
    assert with_flags(listed, flags, ()).thinker.targets == ("dns:///thinker-headless:50051",)
