"""Access control shared by the broker's ports: RocketMQ 4.x's plain ACL (``plain_acl.yml``)
and RocketMQ 5.3's ACL 2.0 (users and ACL policies: ``_auth_model``, ``_auth_eval``,
``_auth_store``, ``_auth_migrate``).

One set of accounts (an access key, a secret key, white remote addresses, an admin flag and
per-topic / per-group permissions), or of users and their ACLs, answers, for the remoting port
and the gRPC front end alike, whether a request from an address, signed by an account, may act
on its topics and groups, by the one authorisation table (``_table``). See docs/security.md.
"""

from ..remoting._signing import RequestSigner as RequestSigner
from ._addresses import AddressPattern as AddressPattern
from ._errors import AccessDeniedError as AccessDeniedError
from ._errors import AclConfigError as AclConfigError
from ._file import AclFile as AclFile
from ._file import StaticAcl as StaticAcl
from ._file import WithAccounts as WithAccounts
from ._file import default_acl_path as default_acl_path
from ._file import load_acl as load_acl
from ._file import process_account as process_account
from ._plain import ANY as ANY
from ._plain import DENY as DENY
from ._plain import PUB as PUB
from ._plain import SUB as SUB
from ._plain import Account as Account
from ._plain import PlainAcl as PlainAcl
from ._plain import admin_accounts as admin_accounts
from ._plain import parse_plain_acl as parse_plain_acl
from ._plain import retry_topic as retry_topic

__all__ = [
    "ANY",
    "DENY",
    "PUB",
    "SUB",
    "AccessDeniedError",
    "Account",
    "AclConfigError",
    "AclFile",
    "AddressPattern",
    "PlainAcl",
    "RequestSigner",
    "StaticAcl",
    "WithAccounts",
    "admin_accounts",
    "default_acl_path",
    "load_acl",
    "parse_plain_acl",
    "process_account",
    "retry_topic",
]
