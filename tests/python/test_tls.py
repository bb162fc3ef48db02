"""test_tls -- WeightStore against masters that serve TLS 1.3 on their TCP
port, their embedded node's data port and their admin endpoint, with
certificates made by the test (master.make_certs, the openssl CLI) and
WM_TLS_* removed from the environment, so only the handle's settings speak.

A put, get, list and remove of a small revision through
WeightStore(tls_ca=...) with the remote transport (the payload through the
node's TLS data port, every tensor compared), the harness reading /metrics
over HTTPS; a wrong CA and no CA are refused with the library's clear
error, nothing changed; against a master that verifies clients, the handle's
client certificate is served and a handle without one is refused; with
auth.certificates mapping that certificate to a tenant, a put and get go
through with no token and land in that tenant, also when the tenant's rate
limit paces every new handle's first request (never a handle of tenant
default), and another tenant's revision is False for weight_is_exist.

Registered as its own ctest, python_weightstore_tls (python_weightstore runs
the other files)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import weightstore as ws
from helpers import model, put_model, unique, wait_for
from master import Master

_TLS_ENV = ("WM_TLS_CA", "WM_TLS_CERT", "WM_TLS_KEY")


@pytest.fixture(scope="module", autouse=True)
def no_tls_environment():
    saved = {k: os.environ.pop(k) for k in _TLS_ENV if k in os.environ}
    yield
    os.environ.update(saved)


@pytest.fixture(scope="module")
def tls_master(no_tls_environment):
    m = Master(tls=True)
    m.start()  # waits for /metrics over HTTPS and a call over TLS
    yield m
    m.stop()


def ident(resource, gen=1):
    return ws.WeightIdentity("llm", resource, "v1", gen)


def listed(store, resource):
    return [m.identity for m in store.weight_list("llm", resource)]


def test_tls_round_trip_put_get_list_remove(tls_master):
    """Every call of the round trip over TLS: the master's RPC and the
    embedded node's data port (remote transport, no byte mapped)."""
    i = ident(unique("tls"))
    src = model(3)
    with ws.WeightStore(tls_master.address, transport=ws.TRANSPORT_REMOTE, **tls_master.store_tls()) as s:
        md = put_model(s, i, src)
        assert md.availability == ws.WeightAvailability.READY
        assert listed(s, i.resource_id) == [md.identity]
        with s.weight_get(i) as load:
            assert not load.zero_copy
            assert set(load) == set(src)
            for name, (arr, _dt) in src.items():
                assert np.array_equal(load[name].array, arr), name
        gone = s.weight_remove(i, expected_metadata_generation=md.metadata_generation)
        assert gone.availability in (ws.WeightAvailability.DELETING, ws.WeightAvailability.DELETED)
        assert wait_for(lambda: not s.weight_is_exist(i))
        assert wait_for(lambda: listed(s, i.resource_id) == [])
        tomb = list(s.weight_list("llm", i.resource_id, include_deleted=True))
        assert [m.availability for m in tomb] == [ws.WeightAvailability.DELETED]
    # the harness's admin client speaks HTTPS to this master
    assert "store_memory_capacity_bytes" in tls_master.metrics()


def test_tls_wrong_or_no_ca_refused_nothing_changed(tls_master):
    i = ident(unique("tls-keep"))
    with ws.WeightStore(tls_master.address, **tls_master.store_tls()) as s:
        md = put_model(s, i, model(4))
        before = [(m.identity, m.metadata_generation) for m in s.weight_list("llm", i.resource_id)]
    with pytest.raises(ws.WeightTransportError) as e:
        ws.WeightStore(tls_master.address, tls_ca=tls_master.certs["other_ca"])
    assert "certificate is not trusted" in str(e.value)
    with pytest.raises(ws.WeightTransportError) as e:  # plaintext: refused at the first call
        with ws.WeightStore(tls_master.address) as plain:
            plain.weight_list("llm", i.resource_id)
    assert "speaks TLS" in str(e.value)
    with ws.WeightStore(tls_master.address, **tls_master.store_tls()) as s:
        after = [(m.identity, m.metadata_generation) for m in s.weight_list("llm", i.resource_id)]
        assert after == before and after[0][0] == md.identity


def test_tls_client_certificate_served_none_refused(no_tls_environment):
    with Master(tls=True, verify_clients=True) as m:
        kw = m.store_tls()
        assert "tls_cert" in kw and "tls_key" in kw
        i = ident(unique("tls-mtls"))
        src = model(5)
        with ws.WeightStore(m.address, transport=ws.TRANSPORT_REMOTE, **kw) as s:
            put_model(s, i, src)
            with s.weight_get(i) as load:
                for name, (arr, _dt) in src.items():
                    assert np.array_equal(load[name].array, arr), name
        # TLS 1.3: the refusal of a handle without a certificate may come with
        # the first answer rather than at the handshake
        with pytest.raises(ws.WeightTransportError):
            with ws.WeightStore(m.address, tls_ca=m.certs["ca"]) as bare:
                bare.weight_is_exist(i)
        assert "store_memory_capacity_bytes" in m.metrics()  # HTTPS with the client certificate


def test_tls_client_certificate_maps_to_tenant_without_token(no_tls_environment, tmp_path, monkeypatch):
    """auth.certificates: the handle's client certificate (CN=client) is
    tenant team-py's writer, with no token anywhere: a put and a remote get
    round trip, the revision lands in team-py, and the master counts the
    mapped certificates. The embedded node, whose certificate maps to
    nothing, registers with its admin token."""
    import hashlib
    monkeypatch.delenv("WEIGHT_TOKEN", raising=False)
    node_token = "py-node-admin-token"
    (tmp_path / "node.token").write_text(node_token + "\n")
    digest = hashlib.sha256(node_token.encode()).hexdigest()
    extra = ("auth:\n  enabled: true\n"
             f"  node_token_file: \"{tmp_path / 'node.token'}\"\n"
             f"  tokens:\n    - {{sha256: {digest}, tenant: ops, role: admin}}\n"
             "  certificates:\n    - {cn: client, tenant: team-py, role: writer}\n")
    with Master(tls=True, verify_clients=True, extra=extra) as m:
        assert "1 certificate mapping" in m.read_log()
        i = ws.WeightIdentity("llm", unique("cert-id"), "v1", 1)
        src = model(6)
        with ws.WeightStore(m.address, transport=ws.TRANSPORT_REMOTE, **m.store_tls()) as s:
            md = put_model(s, i, src)
            assert md.identity.tenant_id == "team-py"
            with s.weight_get(i) as load:
                for name, (arr, _dt) in src.items():
                    assert np.array_equal(load[name].array, arr), name
            assert [x.identity for x in s.weight_list("llm", i.resource_id)] == [md.identity]
        assert 'store_rpc_auth_certificates_total{result="mapped"}' in m.metrics()


def test_tls_certificate_tenant_keeps_its_identity_under_a_rate_limit(no_tls_environment, tmp_path,
                                                                      monkeypatch):
    """auth.limits on a certificate's tenant (team-py: 5 requests a second,
    burst 5): a new WeightStore per call, seven times in a row, still acts
    for team-py -- its HELLO, refused by the rate limit like any request, is
    paced, never taken for a connection without identity (tenant default,
    which listed nothing and found nothing). Another tenant's revision is
    False for weight_is_exist, with a generation or without, as an absent
    one is."""
    import hashlib
    monkeypatch.delenv("WEIGHT_TOKEN", raising=False)
    node_token = "py-node-admin-token"
    (tmp_path / "node.token").write_text(node_token + "\n")
    digest = hashlib.sha256(node_token.encode()).hexdigest()
    extra = ("auth:\n  enabled: true\n"
             f"  node_token_file: \"{tmp_path / 'node.token'}\"\n"
             f"  tokens:\n    - {{sha256: {digest}, tenant: ops, role: admin}}\n"
             "  certificates:\n    - {cn: client, tenant: team-py, role: writer}\n"
             "  limits:\n    tenants:\n      team-py: {rate: 5, burst: 5}\n")
    with Master(tls=True, verify_clients=True, extra=extra) as m:
        i = ws.WeightIdentity("llm", unique("cert-rate"), "v1", 1)
        with ws.WeightStore(m.address, transport=ws.TRANSPORT_REMOTE, **m.store_tls()) as s:
            put_model(s, i, model(2))
        for k in range(7):
            with ws.WeightStore(m.address, transport=ws.TRANSPORT_REMOTE, **m.store_tls()) as s:
                assert s.weight_is_exist(i), k
                assert [x.identity.tenant_id for x in s.weight_list("llm", i.resource_id)] == ["team-py"], k
        theirs = ws.WeightIdentity("llm", i.resource_id, "v1", 1, tenant_id="ops")
        with ws.WeightStore(m.address, transport=ws.TRANSPORT_REMOTE, **m.store_tls()) as s:
            assert s.weight_is_exist(theirs) is False
            assert s.weight_is_exist(ws.WeightIdentity("llm", i.resource_id, "v1", 0, tenant_id="ops")) is False
        refused = [float(line.split()[-1]) for line in m.metrics().splitlines()
                   if line.startswith('store_rpc_refused_total{reason="rate",tenant="team-py"}')]
        assert refused and refused[0] > 0  # the limit did refuse: the calls were paced
