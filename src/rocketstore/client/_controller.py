"""A blocking admin client of RocketMQ 5's controller (what mqadmin's getControllerMetaData,
getSyncStateSet, electMaster, cleanBrokerMetadata, getControllerConfig and
updateControllerConfig send): each request but the metadata goes to the active controller, as
the metadata names it. A refusal raises ``ClientError`` with the controller's code and remark;
a controller out of reach ``RemotingError``.

Any thread (one request at a time per client).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..protocol._controller_bodies import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    encode_broker_names,
)
from ..protocol._controller_headers import (
    CleanBrokerDataRequest,
    ElectMasterRequest,
    ElectMasterResponse,
    GetMetaDataResponse,
)
from ..protocol._properties import format_properties, parse_properties
from ..remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ._route import ClientError


class ControllerAdmin:
    """Requests to the controllers reached through ``address`` (any of them)."""

    def __init__(self, address: str, *, timeout: float = 5.0, client: RemotingClient | None = None):
        self.address = address
        self.client = client if client is not None else RemotingClient(timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ControllerAdmin:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, address: str, code: int, ext: Mapping[str, str] | None = None,
              body: bytes = b"") -> RemotingCommand:  # fmt: skip
        response = self.client.invoke(address, RemotingCommand.request(code, dict(ext or {}), body))
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(response.code, response.remark)
        return response

    def metadata(self, address: str | None = None) -> GetMetaDataResponse:
        """GET_METADATA_INFO of the controller at ``address`` (the client's by default)."""
        response = self._call(address or self.address, RequestCode.CONTROLLER_GET_METADATA_INFO)
        return GetMetaDataResponse.from_ext(response.ext_fields)

    def leader_address(self) -> str:
        """The active controller's address; ClientError when no controller is active."""
        meta = self.metadata()
        if not meta.controller_leader_address:
            raise ClientError(
                ResponseCode.CONTROLLER_NOT_LEADER, f"no active controller (asked {self.address})"
            )
        return meta.controller_leader_address

    def sync_state(self, broker_names: Iterable[str]) -> BrokerReplicasInfo:
        names = list(broker_names)
        response = self._call(
            self.leader_address(),
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
            body=encode_broker_names(names),
        )
        if not response.body:
            return BrokerReplicasInfo()
        return BrokerReplicasInfo.decode(response.body)

    def elect_master(
        self, cluster: str, broker_name: str, broker_id: int
    ) -> tuple[ElectMasterResponse, ElectMasterResponseBody | None]:
        """Designate ``broker_id`` master of its group (an administrator's election)."""
        header = ElectMasterRequest(cluster, broker_name, broker_id, designate_elect=True)
        response = self._call(
            self.leader_address(), RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext()
        )
        body = ElectMasterResponseBody.decode(response.body) if response.body else None
        return ElectMasterResponse.from_ext(response.ext_fields), body

    def clean_broker_data(
        self,
        broker_name: str,
        *,
        cluster: str | None = None,
        broker_ids: Iterable[int] | None = None,
        clean_living: bool = False,
    ) -> None:
        ids = None if broker_ids is None else ";".join(str(i) for i in broker_ids)
        header = CleanBrokerDataRequest(broker_name, cluster, ids or None, clean_living)
        self._call(self.leader_address(), RequestCode.CLEAN_BROKER_DATA, header.to_ext())

    def get_config(self, address: str | None = None) -> dict[str, str]:
        response = self._call(address or self.address, RequestCode.GET_CONTROLLER_CONFIG)
        return parse_properties(bytes(response.body))

    def update_config(self, values: Mapping[str, str], address: str | None = None) -> None:
        body = format_properties(values).encode("utf-8")
        self._call(address or self.address, RequestCode.UPDATE_CONTROLLER_CONFIG, body=body)
