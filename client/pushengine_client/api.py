"""The methods of every flavour, made once from the calls' description.

Each attribute of ``Api`` is an ``Endpoint`` around one method of
``calls.Calls``: on a client it is a method with the same parameters that
builds the call and runs it with the client's own ``_run`` — blocking on a
``SyncClient`` (the result), a Deferred on a ``TwistedClient``, a coroutine
on an ``AsyncClient``. The type checker sees each: ``SyncClient.bf_add``
returns ``bool``, ``TwistedClient.bf_add`` ``Deferred[bool]``,
``AsyncClient.bf_add`` a coroutine of ``bool``.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from pushengine_client.calls import Call, Calls

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from pushengine_client.aio import AsyncClient
    from pushengine_client.sync import SyncClient
    from pushengine_client.tx import TwistedClient

P = ParamSpec("P")
T = TypeVar("T")


class Endpoint(Generic[P, T]):
    """One call, offered as a method by every flavour."""

    def __init__(self, build: Callable[Concatenate[Calls, P], Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.name = build.__name__
        signature = inspect.signature(build)
        # the method's own parameters: those of the description, less its self
        self.signature = signature.replace(parameters=list(signature.parameters.values())[1:],
                                           return_annotation=inspect.Signature.empty)

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Endpoint[P, T]: ...

    @overload
    def __get__(self, obj: TwistedClient, owner: type[Any]) -> Callable[P, Deferred[T]]: ...

    @overload
    def __get__(self, obj: SyncClient, owner: type[Any]) -> Callable[P, T]: ...

    @overload
    def __get__(self, obj: AsyncClient,
                owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __get__(self, obj: Api, owner: type[Any]) -> Callable[P, Any]: ...

    def __get__(self, obj: Api | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def method(*args: Any, **kwargs: Any) -> Any:
            return obj._run(functools.partial(build, obj.calls, *args, **kwargs))
        method.__signature__ = self.signature     # type: ignore[attr-defined]
        return method


class Api:
    """What a backend can ask of a node (each documented in ``Calls``)."""

    calls: Calls

    def _run(self, make: Callable[[], Call[Any]]) -> Any:
        """Build the call with ``make`` and run it with retries; the
        flavour's answer (the result, or a Deferred of it)."""
        raise NotImplementedError

    rpc = Endpoint(Calls.rpc)
    publish = Endpoint(Calls.publish)
    upsert = Endpoint(Calls.upsert)
    upsert_many = Endpoint(Calls.upsert_many)
    delete = Endpoint(Calls.delete)
    delete_many = Endpoint(Calls.delete_many)
    bf_reserve = Endpoint(Calls.bf_reserve)
    bf_add = Endpoint(Calls.bf_add)
    bf_madd = Endpoint(Calls.bf_madd)
    bf_exists = Endpoint(Calls.bf_exists)
    bf_mexists = Endpoint(Calls.bf_mexists)
    bf_insert = Endpoint(Calls.bf_insert)
    bf_info = Endpoint(Calls.bf_info)
    upload_segment = Endpoint(Calls.upload_segment)
    segments = Endpoint(Calls.segments)
    delete_segment = Endpoint(Calls.delete_segment)
    online = Endpoint(Calls.online)
    unique = Endpoint(Calls.unique)
    health = Endpoint(Calls.health)
    admin_stats = Endpoint(Calls.admin_stats)
    admin_publish = Endpoint(Calls.admin_publish)
    admin_session = Endpoint(Calls.admin_session)
    admin_subscribe = Endpoint(Calls.admin_subscribe)
    admin_unsubscribe = Endpoint(Calls.admin_unsubscribe)
