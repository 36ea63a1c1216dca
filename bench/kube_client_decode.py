"""The client's CPU per Pod and per Node that a Kubernetes client library spends on a LIST and on
WATCH events: what chose kubus.kubeapi's client (a thin one over aiohttp, decoding with orjson).

    python bench/kube_client_decode.py                       # 2,500 real objects, replicated to 50,000
    python bench/kube_client_decode.py --real 50000          # all 50,000 created through the API (slow)
    python bench/kube_client_decode.py --only thin,lightkube --repeat 5

Run it with a Python where kubus imports and the candidates are installed
(``pip install lightkube kr8s kubernetes-asyncio httpx``); a candidate that does not import is
left out of the table, with the reason. It starts a real kube-apiserver v1.28.4 + etcd
(tests/kube_support.py, from ../shared/kube), creates ``--real`` Nodes (Ready, through
nodes/status, as kwok) and as many Pods, each bound to a Node (pods/binding), and reads back
what the apiserver serves: the LIST bodies of Pods and Nodes, and the WATCH streams from
resourceVersion 0 (the apiserver's ADDED event for every object). Creating 50,000 of each (with
the status patches and bindings, 200,000 requests) takes minutes here (about 1,600 requests/s on
2 cores shared with other work), so by default 2,500 of each are created and the served items are
replicated (each copy renamed, new uid, re-encoded compactly by orjson: the same keys in the same
order) into a LIST of 50,000 and 50,000 WATCH lines. Served and replicated bytes per object are
printed, to show they match.

Table 1, decode: process CPU per object for each library's own decoding of those bytes, done as
the library does it (min of ``--repeat`` runs):
- thin: kubus.core.codec (orjson) to plain dicts; watch lines through kubus.kubeapi's `Watch`
  (split, decode, `WatchEvent`); thin-json: the same with the standard library's json;
- lightkube 1.0 (msgspec structs: `decoders.decode_list`, and its watch driver's
  `process_one_line`: decode the event, then the object into a Pod/Node struct);
- kr8s (httpx's response.json(), i.e. json.loads, then a Pod/Node APIObject per item; a watch
  event also reads ``obj.metadata.resourceVersion``, a Box, as kr8s does);
- kubernetes-asyncio (ApiClient.deserialize into V1PodList/V1NodeList models; a watch event
  through Watch.unmarshal_event, which re-encodes each object before deserializing it).

Table 2, end to end: the client process's CPU per object for each library's real LIST (one
unpaged request; kr8s pages by 100, as it does) and WATCH (from resourceVersion 0 until every
object has come) against the apiserver, over TLS on loopback, ``--real`` objects: HTTP, TLS,
decompression (each library's default Accept-Encoding) and decoding. thin is kubus.kubeapi's
KubeClient (aiohttp, identity encoding); thin-httpx the same decode over httpx, for the choice
of HTTP library.

Measured here (Python 3.11.7, aiohttp 3.14.5, httpx 0.28.1, lightkube 1.0.1, kr8s 0.20.15,
kubernetes-asyncio 36.1.0, orjson 3.13.0; 2 cores shared with other work, so +-15% from run to run).
Served objects: a Pod 1,679 B in the LIST (1,735 B as a watch event), a Node 1,858 B (1,915 B);
replicated: 1,682 and 1,861 B. µs of client CPU per object:

    decode, 50,000 objects per case (2,500 real, replicated), min of 3
    library                 Pod LIST   Pod WATCH   Node LIST  Node WATCH
    thin                        61.4         6.6        61.2         7.3
    thin-json                   65.4        12.1        69.1        13.0
    lightkube                   62.0         7.7        59.1         7.5
    kr8s                      1169.3       682.4      1184.7       684.9
    kubernetes-asyncio         325.9       231.0       362.1       279.1

    end to end against the apiserver, 2,500 real objects, min of 3
    library                 Pod LIST   Pod WATCH   Node LIST  Node WATCH
    thin                        44.6        17.2        43.8        16.0
    thin-httpx                  44.4        31.0        43.6        34.4
    lightkube                   48.0        33.6        46.2        36.2
    kr8s                       903.0       624.8      1003.4       722.6
    kubernetes-asyncio         235.9       235.7       289.8       305.7

Choice: the thin client (kubus.kubeapi) over aiohttp, decoding with orjson into plain dicts.
Decoding alone, it ties lightkube 1.0 (whose msgspec structs cost what orjson's dicts cost) and is
5-35 times cheaper than kubernetes-asyncio's models and 20-100 times cheaper than kr8s's Boxes;
end to end, a WATCH event costs half of what it costs over httpx (lightkube's and kr8s's HTTP
library: 31-36 against 16-17 µs), which is what a scheduler's watches pay for every change, and
kubus wants dicts (its own model is built from them), not another library's objects. aiohttp is
the one new dependency.

What a LIST of 50,000 costs is mostly CPython's cyclic GC, whatever the library: the decoded
objects are about a million tracked containers, and the full collections that their growth
triggers walk them all again and again (in a probe of 50,000 Pods of 1.4 KB in one body: 10 full
collections, 1.3 s of the 1.9 s of decoding; with the GC off, 9.4 µs a Pod instead of 38). A
consumer that keeps them pays it; one that turns each page into its own model and drops it
(`KubeClient.pages`) mostly does not. The WATCH columns decode one object at a time and drop it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kube_support import KubeApiServer, ensure_namespace, kube_binaries, make_nodes, pod_manifest

from kubus.core import codec
from kubus.kubeapi import NODES, PODS, Resource
from kubus.kubeapi.client import Watch

NAMESPACE = "bench"
LIBRARIES = ("thin", "thin-json", "lightkube", "kr8s", "kubernetes-asyncio")
_CLOSE: list[Any] = []
"""kubernetes-asyncio ApiClients made for decoding, closed when done."""


# -- the objects --------------------------------------------------------------------------------


async def populate(server: KubeApiServer, count: int) -> None:
    """``count`` Ready Nodes and ``count`` Pods, each bound to a Node."""
    async with server.client(qps=0) as kube:
        await ensure_namespace(kube, NAMESPACE)
        started = time.perf_counter()
        nodes = [f"node-{i:05d}" for i in range(count)]
        await make_nodes(kube, nodes, concurrency=48)
        semaphore = asyncio.Semaphore(48)

        async def pod(i: int) -> None:
            async with semaphore:
                manifest = pod_manifest(f"pod-{i:05d}", cpu="250m", memory="512Mi")
                manifest["metadata"]["labels"] = {"app": f"app-{i % 50}", "tier": "bench"}
                created = await kube.create(PODS, manifest, namespace=NAMESPACE)
                await kube.bind(NAMESPACE, created["metadata"]["name"], nodes[i], uid=created["metadata"]["uid"])

        await asyncio.gather(*(pod(i) for i in range(count)))
        print(f"created {count} nodes and {count} bound pods in {time.perf_counter() - started:.1f} s", flush=True)


async def served(server: KubeApiServer, resource: Resource, count: int) -> tuple[bytes, list[bytes]]:
    """The LIST body and the first ``count`` WATCH lines (from resourceVersion 0) as served."""
    namespace = NAMESPACE if resource.namespaced else None
    headers = {"Authorization": f"Bearer {server.token}", "Accept": "application/json", "Accept-Encoding": "identity"}
    ssl = server.config().ssl_context()
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(server.url + resource.path(namespace), ssl=ssl) as response:
            body = await response.read()
        lines: list[bytes] = []
        params = {"watch": "true", "resourceVersion": "0", "timeoutSeconds": "60"}
        async with session.get(server.url + resource.path(namespace), params=params, ssl=ssl) as response:
            while len(lines) < count:
                lines.append((await response.content.readline()).rstrip(b"\n"))
    return body, lines


def replicate(body: bytes, lines: list[bytes], total: int) -> tuple[bytes, list[bytes]]:
    """A LIST body of ``total`` items and ``total`` WATCH lines, copies of the served ones."""
    listed = codec.loads(body)
    items, events = listed["items"], [codec.loads(line) for line in lines]
    out_items, out_lines = [], []
    for i in range(total):
        copy, event = i // len(items), events[i % len(events)]
        item = _renamed(items[i % len(items)], copy)
        out_items.append(item)
        out_lines.append(codec.dumps({"type": event["type"], "object": _renamed(event["object"], copy)}))
    listed["items"] = out_items
    return codec.dumps(listed), out_lines


def _renamed(obj: dict[str, Any], copy: int) -> dict[str, Any]:
    if copy == 0:
        return obj
    obj = codec.loads(codec.dumps(obj))
    meta = obj["metadata"]
    meta["name"] = f"{meta['name']}-r{copy}"
    meta["uid"] = f"{meta['uid'][:-6]}{copy:06d}"
    return obj


# -- decoding, as each library does it ------------------------------------------------------------


def decoders(library: str, kind: str) -> tuple[Callable[[bytes], int], Callable[[list[bytes]], int]]:
    """(decode a LIST body, decode WATCH lines) as ``library`` does, each returning a count."""
    if library == "thin":
        watch = Watch(None, server="", resource=PODS)  # type: ignore[arg-type]  # only its decoding is used

        def thin_list(body: bytes) -> int:
            return len(codec.loads(body)["items"])

        def thin_watch(lines: list[bytes]) -> int:
            return sum(1 for line in lines if watch._event(line).object)

        return thin_list, thin_watch
    if library == "thin-json":

        def json_list(body: bytes) -> int:
            return len(json.loads(body)["items"])

        def json_watch(lines: list[bytes]) -> int:
            return sum(1 for line in lines if json.loads(line)["object"])

        return json_list, json_watch
    if library == "lightkube":
        from lightkube.core import decoders as lk
        from lightkube.resources.core_v1 import Node, Pod

        res = Pod if kind == "Pod" else Node

        def lightkube_list(body: bytes) -> int:
            return len(lk.decode_list(body, res)[2])

        def lightkube_watch(lines: list[bytes]) -> int:
            count = 0
            for line in lines:  # WatchDriver.process_one_line
                event = lk.decode_watch_event(line)
                obj = lk.decode_object(event.object, res)
                count += bool(obj.metadata.resourceVersion)
            return count

        return lightkube_list, lightkube_watch
    if library == "kr8s":
        from kr8s.asyncio.objects import Node as KNode
        from kr8s.asyncio.objects import Pod as KPod

        cls = KPod if kind == "Pod" else KNode

        def kr8s_list(body: bytes) -> int:
            return len([cls(item, api=None) for item in json.loads(body)["items"]])

        def kr8s_watch(lines: list[bytes]) -> int:
            count = 0
            for line in lines:  # kr8s's async_watch
                event = json.loads(line)
                obj = cls(event["object"], api=None)
                count += bool(obj.metadata.resourceVersion)
            return count

        return kr8s_list, kr8s_watch
    if library == "kubernetes-asyncio":
        from kubernetes_asyncio.client import ApiClient
        from kubernetes_asyncio.watch import Watch as KWatch

        client = ApiClient()
        _CLOSE.append(client)
        kwatch = KWatch()
        _CLOSE.append(kwatch._api_client)  # its own, replaced by the one above
        kwatch._api_client = client

        def kube_list(body: bytes) -> int:
            return len(client.deserialize(SimpleNamespace(data=body), f"V1{kind}List").items)

        def kube_watch(lines: list[bytes]) -> int:
            return sum(1 for line in lines if kwatch.unmarshal_event(line, f"V1{kind}")["object"])

        return kube_list, kube_watch
    raise ValueError(library)


def cpu_per_object(run: Callable[[], int], repeat: int) -> float:
    """The least process CPU per object, in µs, of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        count = run()
        spent = time.process_time() - start
        best = min(best, spent / count * 1e6)
        if spent > 10:  # kr8s, kubernetes-asyncio: one run tells
            break
    return best


# -- end to end --------------------------------------------------------------------------------


async def end_to_end(
    library: str, server: KubeApiServer, resource: Resource, count: int, repeat: int
) -> tuple[float, float]:
    """(LIST, WATCH) process CPU per object, µs, of ``library``'s own client against the apiserver."""
    namespace = NAMESPACE if resource.namespaced else None
    kind = resource.kind
    if library == "thin":
        async with server.client(qps=0) as kube:

            async def listing() -> int:
                return len((await kube.list(resource, namespace=namespace, limit=None)).items)

            async def watching() -> int:
                seen = 0
                async with kube.watch(
                    resource, namespace=namespace, resource_version="0", timeout_seconds=120
                ) as events:
                    async for _ in events:
                        seen += 1
                        if seen == count:
                            break
                return seen

            return await _measure(listing, watching, repeat)
    if library == "thin-httpx":
        import httpx

        headers = {"Authorization": f"Bearer {server.token}", "Accept": "application/json"}
        async with httpx.AsyncClient(
            verify=server.config().ssl_context() or True, headers=headers, timeout=120
        ) as http:
            url = server.url + resource.path(namespace)

            async def listing() -> int:
                response = await http.get(url)
                return len(codec.loads(response.content)["items"])

            async def watching() -> int:
                seen = 0
                params = {"watch": "true", "resourceVersion": "0", "allowWatchBookmarks": "true"}
                async with http.stream("GET", url, params=params) as response:
                    async for line in response.aiter_lines():
                        if line and codec.loads(line)["object"]:
                            seen += 1
                            if seen == count:
                                break
                return seen

            return await _measure(listing, watching, repeat)
    if library == "lightkube":
        from lightkube import AsyncClient, KubeConfig
        from lightkube.resources.core_v1 import Node, Pod

        res: Any = Pod if kind == "Pod" else Node
        client = AsyncClient(KubeConfig.from_file(str(server.kubeconfig)))
        try:

            async def listing() -> int:
                kwargs = {"namespace": namespace} if namespace else {}
                return len([obj async for obj in client.list(res, **kwargs)])

            async def watching() -> int:
                seen = 0
                kwargs = {"namespace": namespace} if namespace else {}
                async for _ in client.watch(res, resource_version="0", **kwargs):
                    seen += 1
                    if seen == count:
                        break
                return seen

            return await _measure(listing, watching, repeat)
        finally:
            await client.close()
    if library == "kr8s":
        import kr8s.asyncio

        api = await kr8s.asyncio.api(kubeconfig=str(server.kubeconfig))
        plural = resource.plural

        async def listing() -> int:
            return len([obj async for obj in api.get(plural, namespace=namespace)])

        async def watching() -> int:
            seen = 0
            async for _ in api.watch(plural, namespace=namespace, since="0"):
                seen += 1
                if seen == count:
                    break
            return seen

        return await _measure(listing, watching, repeat)
    if library == "kubernetes-asyncio":
        from kubernetes_asyncio import client as kclient
        from kubernetes_asyncio import config as kconfig
        from kubernetes_asyncio import watch as kwatch

        await kconfig.load_kube_config(config_file=str(server.kubeconfig))
        async with kclient.ApiClient() as api_client:
            core = kclient.CoreV1Api(api_client)
            if namespace:
                lister: Any = core.list_namespaced_pod
                args: tuple[Any, ...] = (namespace,)
            else:
                lister, args = core.list_node, ()

            async def listing() -> int:
                return len((await lister(*args)).items)

            async def watching() -> int:
                seen = 0
                stream = kwatch.Watch()
                async for _ in stream.stream(lister, *args, resource_version="0", timeout_seconds=120):
                    seen += 1
                    if seen == count:
                        break
                stream.stop()
                await stream._api_client.close()  # the Watch's own, for decoding
                return seen

            return await _measure(listing, watching, repeat)
    raise ValueError(library)


async def _measure(listing: Any, watching: Any, repeat: int) -> tuple[float, float]:
    await listing()  # warm: connections, discovery
    results = []
    for step in (listing, watching):
        best = float("inf")
        for _ in range(repeat):
            gc.collect()
            start = time.process_time()
            count = await step()
            spent = time.process_time() - start
            best = min(best, spent / count * 1e6)
            if spent > 10:
                break
        results.append(best)
    return results[0], results[1]


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=int, default=2500, help="objects of each kind created through the API")
    parser.add_argument("--total", type=int, default=50_000, help="objects decoded per case")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated libraries (default: all)")
    parser.add_argument("--no-e2e", action="store_true", help="leave out table 2")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="kube-bench-") as folder,
        KubeApiServer(kube_binaries(), Path(folder)) as server,
    ):
        asyncio.run(populate(server, args.real))
        asyncio.run(decode_tables(server, args))
        if not args.no_e2e:
            columns = ["Pod LIST", "Pod WATCH", "Node LIST", "Node WATCH"]
            e2e: dict[str, dict[str, float]] = {}
            libraries = args.only.split(",") if args.only else ["thin", "thin-httpx", *LIBRARIES[2:]]
            for library in libraries:
                try:
                    for resource in (PODS, NODES):
                        listed, watched = asyncio.run(end_to_end(library, server, resource, args.real, args.repeat))
                        e2e.setdefault(library, {})[f"{resource.kind} LIST"] = listed
                        e2e[library][f"{resource.kind} WATCH"] = watched
                    print(f"  end to end: {library}", flush=True)
                except (ImportError, ValueError) as error:
                    print(f"{library}: left out ({error!r})")
            _table(
                f"end to end, client CPU µs per object ({args.real:,} real objects, min of {args.repeat})", columns, e2e
            )


async def decode_tables(server: KubeApiServer, args: argparse.Namespace) -> None:
    """Table 1 (in a running event loop: kubernetes-asyncio's ApiClient needs one)."""
    available = []
    for library in args.only.split(",") if args.only else LIBRARIES:
        try:
            decoders(library, "Pod")
            available.append(library)
        except (ImportError, ValueError) as error:
            print(f"{library}: left out ({error!r})")
    rows: dict[str, dict[str, float]] = {library: {} for library in available}
    for resource in (PODS, NODES):
        body, lines = await served(server, resource, args.real)
        big_body, big_lines = replicate(body, lines, args.total)
        print(
            f"{resource.kind}: served {len(body) / args.real:.0f} B/object in the LIST, "
            f"{sum(map(len, lines)) / len(lines):.0f} B/event; replicated: {len(big_body) / args.total:.0f} and "
            f"{sum(map(len, big_lines)) / len(big_lines):.0f}",
            flush=True,
        )
        for library in available:
            decode_list, decode_watch = decoders(library, resource.kind)
            rows[library][f"{resource.kind} LIST"] = cpu_per_object(partial(decode_list, big_body), args.repeat)
            rows[library][f"{resource.kind} WATCH"] = cpu_per_object(partial(decode_watch, big_lines), args.repeat)
            print(f"  decoded: {library}", flush=True)
        del big_body, big_lines
    for client in _CLOSE:
        await client.close()
    columns = ["Pod LIST", "Pod WATCH", "Node LIST", "Node WATCH"]
    _table(f"decode, µs per object ({args.total:,} objects per case, min of {args.repeat})", columns, rows)


def _table(title: str, columns: list[str], rows: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}")
    print(f"{'library':<20}" + "".join(f"{c:>12}" for c in columns))
    for library, values in rows.items():
        print(f"{library:<20}" + "".join(f"{values.get(c, float('nan')):>12.1f}" for c in columns))
    print(flush=True)


if __name__ == "__main__":
    main()
