"""Who may call a job's core worker (docs/protocol.md, "The job token"), as
Go's worker/jobauth.go: its own job's token may call everything, another
live job's token actor calls and object reads, an admin token everything,
and nothing else anything. A token is resolved once per connection with
Auth.Check at this process's node, and the answer kept AUTH_TTL seconds."""

import hmac
import threading
import time

from . import _protocol as P

AUTH_TTL = 10.0  # seconds a node's answer about a token is trusted (authTTL)
AUTH_CACHE_MAX = 1024  # tokens remembered (authCacheMax)
AUTH_CHECK_TIMEOUT = 5.0  # seconds for one Auth.Check (authCheckTimeout)

OWN_JOB = "this job's token"  # the requirement of OWN_JOB_METHODS (grantOwnJob)
OWN_JOB_METHODS = frozenset({"Task.Push", "Actor.Construct", "Task.RevokeLeases", "Owner.CancelTask"})

# The roles of the methods a core worker serves (wire.MethodRoles).
METHOD_ROLES = {"Task.Push": "submit", "Task.RevokeLeases": "admin", "Task.Cancel": "submit",
                "Actor.Construct": "submit", "Actor.Call": "submit", "Object.Get": "read",
                "Object.GetMany": "read", "Object.RefRemoved": "submit",
                "Owner.CancelTask": "submit"}

HINT = ("a job's core workers take connections presenting its job token (its own processes do so by themselves); "
        "another job's token may call actors and read objects, an admin token anything")

_ALL = frozenset({"read", "submit", "join", "admin", "open", OWN_JOB})
_SUBMIT = frozenset({"submit", "read", "open"})  # wire.GrantsOf(pki.RoleSubmit)


def require(method):
    """The role method needs on a core worker's port (coreWorkerRequirement);
    None when it has none, so it is refused to everyone."""
    if method in OWN_JOB_METHODS:
        return OWN_JOB
    return METHOD_ROLES.get(method)


class JobAuth:
    """Authenticates connections to a core worker whose job token is
    ``own``; ``check(token)`` asks the node (Auth.Check) and returns its
    AuthCheckReply map, raising P.RpcError or P.TransportError."""

    def __init__(self, own, check):
        self.own = own
        self.check = check
        self.lock = threading.Lock()
        self.cache = {}  # token -> (Principal, until)

    def auth(self):
        """The P.Auth of the core worker's server."""
        return P.Auth(self.authenticate, require, HINT)

    def authenticate(self, token):
        """The principal of a connection that presented token ("" for none)."""
        if not token:
            return P.Principal("anonymous", "none", note="no token presented")
        now = time.monotonic()
        with self.lock:
            hit = self.cache.get(token)
        if hit is not None and now < hit[1]:
            return hit[0]
        try:
            rep = self.check(token) or {}
        except P.RpcError as e:
            if e.code != P.CODE_PERMISSION_DENIED:
                return P.Principal("anonymous", "none",
                                   note=f"its token could not be checked with this process's node: {e}")
            p = P.Principal("anonymous", "none", note=e.message)
        except Exception as e:  # the node did not answer: nothing to remember
            return P.Principal("anonymous", "none", note=f"its token could not be checked with this process's node: {e}")
        else:
            tid, role, job = rep.get("TokenID") or "", rep.get("Role") or "", rep.get("Job") or ""
            if hmac.compare_digest(token.encode(), self.own.encode()):
                p = P.Principal(f"token {tid} of this job", "submit", _SUBMIT | {OWN_JOB})
            elif role == "admin":
                p = P.Principal(f"token {tid}", "admin", _ALL)
            elif job:
                p = P.Principal(f"token {tid} of job {job}", "submit (another job)", _SUBMIT)
            else:
                p = P.Principal(f"token {tid}", "none", note=f"token {tid} (role {role}) is not a job token")
        self._remember(token, p, now)
        return p

    def _remember(self, token, p, now):
        with self.lock:
            if len(self.cache) >= AUTH_CACHE_MAX:
                for k in [k for k, v in self.cache.items() if now >= v[1]]:
                    del self.cache[k]
                if len(self.cache) >= AUTH_CACHE_MAX:
                    self.cache.clear()
            self.cache[token] = (p, now + AUTH_TTL)
