"""``susurrus serve-ray`` on a 2-node Ray cluster on this machine, beside plain ``susurrus serve``.

Needs the extra (``pip install -e ".[ray]"``). The script starts the cluster itself, as a user
would on two machines: ``ray start --head --num-cpus 1 --block`` and ``ray start --address
HEAD --num-cpus 1 --block`` (two raylets, one CPU each; ``--block`` so that stopping those two
processes, by their ids, tears the cluster down), deploys the app with 2 replicas (1 CPU each:
one per node) behind one Serve HTTP proxy on the head, and measures with real-time clients
(OpenAI Realtime protocol, 24 kHz PCM16, 100 ms appends at speaking pace, a commit at the end):

1. plain ``susurrus serve --workers 2`` (same machine, same clients): per-word latency, CPU,
   memory, and the engine's cost per audio second (from ``/metrics``), which sets a replica's
   capacity (``ray_serve.capacity``);
3. spread: N sessions on the 2 replicas: sessions and per-word latency per replica, CPU and
   memory of the whole Ray cluster;
4. kill: N sessions, then one replica's process is killed (SIGKILL) mid-stream: what its
   sessions got (error event, close code, time to learn it; none may hang), whether the others
   completed, where new sessions opened right after go, how long until Serve has 2 replicas again;
2. scale-down (first, on the application's first deployment): Serve's autoscaler removes one of
   2 replicas while N sessions (25 s and 45 s pieces of a long recording) are live: the removed
   replica's sessions that end within its grace finish as usual, the longer ones are drained when
   the grace ends (open item committed and completed, close 1012);
5. flow control: one session sends a recording as fast as the connection takes it, plain and
   through Serve's proxy.

    python benchmarks/ray_cluster.py                     # 8 sessions; grace 15 s, drain 20 s
    python benchmarks/ray_cluster.py --sessions 4 --skip-plain
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ray_cluster_parts import (  # noqa: E402
    RATE,
    Session,
    cpu_s,
    free_port,
    metric,
    rss_mb,
    run_session,
    stats,
    tree,
    wait_http,
)

from susurrus.audio.io import decode_audio, resample  # noqa: E402
from susurrus.client import to_pcm16  # noqa: E402
from susurrus.evaluation.data import SHARED_DATA, read_manifest  # noqa: E402

SHORT = ["ljspeech_LJ001-0001", "librispeech_test-clean_1089-134686-0000", "jfk_inaugural",
         "ljspeech_LJ001-0003", "ljspeech_LJ001-0014", "ljspeech_LJ001-0015", "ljspeech_LJ001-0027",
         "ljspeech_LJ001-0010"]
LONG = "dev_ljspeech_LJ001-0001_to_0032"  # 234 s; sessions take 25 s and 45 s pieces of it
# Ray's token authentication (its default for clusters) for the nodes, `ray status` and this driver
# alike: set before ray is imported, which reads it once
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
RAY_ENV = dict(os.environ)


# ---------------------------------------------------------------------------- phases


def load_audio(n: int) -> tuple[list[tuple[str, np.ndarray]], list[tuple[str, np.ndarray]], tuple[str, np.ndarray]]:
    dev = {i.id: i for i in read_manifest(SHARED_DATA / "dev" / "manifest.jsonl")}
    longform = {i.id: i for i in read_manifest(SHARED_DATA / "longform" / "manifest.jsonl")}

    def pcm(audio16k: np.ndarray) -> np.ndarray:
        return to_pcm16(resample(audio16k, 16000, RATE))

    shorts = [(name, pcm(decode_audio(dev[name].audio))) for name in (SHORT * 2)[:n]]
    whole = decode_audio(longform[LONG].audio)
    longs = []
    for k in range(n):  # 25 s and 45 s pieces of it, in turn
        start, length = 35 * k % 200, 25 if k % 2 == 0 else 45
        longs.append((f"{LONG[:14]}@{start}s", pcm(whole[16000 * start:16000 * (start + length)])))
    return shorts, longs, ("120 s of " + LONG, pcm(whole[:16000 * 120]))


async def run_many(url: str, sessions: list[Session], stagger_s: float = 0.3, timeout_s: float = 180) -> None:
    tasks = []
    for s in sessions:
        tasks.append(asyncio.create_task(run_session(url, s, timeout_s)))
        await asyncio.sleep(stagger_s)
    await asyncio.gather(*tasks)


def plain_phase(sessions: list[Session], fast: Session) -> dict:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "susurrus", "serve", "--port", str(port), "--workers", "2",
                               "--threads", "1", "--log-level", "warning"], stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        procs = tree([server.pid])
        cpu0, t0 = cpu_s(procs), time.perf_counter()
        asyncio.run(run_many(f"ws://127.0.0.1:{port}/v1/realtime", sessions))
        wall = time.perf_counter() - t0
        out = {"cpu": cpu_s(procs) - cpu0, "wall": wall, "rss": rss_mb(procs),
               "compute": metric(f"http://127.0.0.1:{port}/metrics", "susurrus_compute_seconds_total"),
               "audio": metric(f"http://127.0.0.1:{port}/metrics", "susurrus_audio_seconds_total")}
        asyncio.run(run_session(f"ws://127.0.0.1:{port}/v1/realtime", fast, 300))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return out


class Cluster:
    """Two ``ray start --block`` nodes on this machine (1 CPU each) and Serve on them."""

    def __init__(self, temp_dir: str, http_port: int):
        self.ray = str(Path(sys.executable).with_name("ray"))
        self.gcs_port = free_port()
        self.http_port = http_port
        self.temp_dir = temp_dir
        self.nodes: list[subprocess.Popen] = []
        self.serving = False

    def start(self) -> None:
        import ray

        log = open(Path(self.temp_dir + ".log"), "w")  # noqa: SIM115
        self.nodes.append(subprocess.Popen(
            [self.ray, "start", "--head", "--num-cpus", "1", "--port", str(self.gcs_port), "--include-dashboard=false",
             "--temp-dir", self.temp_dir, "--block"], env=RAY_ENV, stdout=log, stderr=log))
        self.address = f"{ray.util.get_node_ip_address()}:{self.gcs_port}"
        self._wait_nodes(1)
        self.nodes.append(subprocess.Popen([self.ray, "start", "--address", self.address, "--num-cpus", "1", "--block"],
                                           env=RAY_ENV, stdout=log, stderr=log))
        ray.init(address=self.address, namespace="susurrus-bench", log_to_driver=False)
        deadline = time.monotonic() + 120
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the second node did not join")
            time.sleep(0.5)

    def _wait_nodes(self, n: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            out = subprocess.run([self.ray, "status", "--address", f"127.0.0.1:{self.gcs_port}"], env=RAY_ENV,
                                 capture_output=True, text=True)
            if out.returncode == 0:
                return
            time.sleep(1)
        raise RuntimeError("the head node did not start")

    def deploy(self, replicas: int, grace_s: float, drain_s: float, per_replica: int, scale=None) -> None:
        from ray import serve

        from susurrus.server.ray_serve import APP_NAME, ReplicaOptions, ScaleOptions, build_app

        if not self.serving:
            serve.start(http_options={"host": "127.0.0.1", "port": self.http_port, "location": "HeadOnly"})
            self.serving = True
        # each serve.run from Python is a new version (Serve gives it a random one): the replicas are
        # replaced one by one, each old one draining like a removed replica
        scale = scale or ScaleOptions(num_replicas=replicas, sessions_per_replica=per_replica)
        serve.run(build_app(ReplicaOptions(drain_s=drain_s, scale_down_grace_s=grace_s), scale),
                  name=APP_NAME, route_prefix="/")

    def replicas(self) -> list[dict]:
        from ray.serve.context import _get_global_client

        details = _get_global_client().get_serve_details()
        app = details["applications"].get("susurrus", {})
        return [{"id": r["replica_id"], "state": str(r["state"]), "pid": r.get("pid"), "node": r.get("node_id", "")}
                for r in app.get("deployments", {}).get("susurrus", {}).get("replicas", [])]

    def running(self) -> list[dict]:
        return [r for r in self.replicas() if r["state"].endswith("RUNNING")]

    def wait_running(self, n: int, timeout: float = 240) -> float:
        t0 = time.monotonic()
        while len(self.running()) != n:
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"Serve did not reach {n} running replicas: {self.replicas()}")
            time.sleep(0.5)
        return time.monotonic() - t0

    def stop(self) -> None:
        import ray
        from ray import serve

        try:
            serve.shutdown()
        except Exception:  # noqa: BLE001
            pass
        ray.shutdown()
        for node in reversed(self.nodes):  # by their ids: each stops the processes it started
            node.send_signal(signal.SIGTERM)
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()


def latency_rows(title: str, sessions: list[Session], names: dict[str, str]) -> list[str]:
    rows = []
    for rid in sorted({s.replica for s in sessions}):
        mine = [s for s in sessions if s.replica == rid]
        lat = [x for s in mine for x in s.latencies]
        rows.append(f"| {title} | {names.get(rid, rid)} | {len(mine)} | {sum(s.completed for s in mine)} | "
                    f"{len(lat)} | {stats(lat)} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--grace-s", type=float, default=15.0, help="scale_down_grace_s of the replicas")
    ap.add_argument("--drain-s", type=float, default=20.0, help="drain_s of the replicas")
    ap.add_argument("--sessions-per-replica", type=int, default=6,
                    help="replica capacity for this run: 8 sessions, and 2 more on the survivor of the kill, must fit "
                         "on 2 replicas (default: %(default)s)")
    ap.add_argument("--downscale-delay-s", type=float, default=10.0,
                    help="the autoscaler's downscale delay in the scale-down phase")
    ap.add_argument("--skip-plain", action="store_true")
    ap.add_argument("--kill-after-s", type=float, default=4.0)
    args = ap.parse_args()
    n = args.sessions
    shorts, longs, flood = load_audio(n)
    report: list[str] = []

    # 1. plain susurrus serve
    plain: dict = {}
    plain_sessions = [Session(name, pcm) for name, pcm in shorts]
    fast_plain, fast_ray = (Session(flood[0], flood[1], paced=False) for _ in range(2))
    if not args.skip_plain:
        print(f"plain susurrus serve --workers 2: {n} sessions ...", file=sys.stderr)
        plain = plain_phase(plain_sessions, fast_plain)

    cluster = Cluster(f"/tmp/susurrus_ray_{os.getpid()}", free_port())
    try:
        t = time.perf_counter()
        print("starting the 2-node cluster ...", file=sys.stderr)
        cluster.start()
        started = time.perf_counter() - t
        # 2. scale-down during live sessions, decided by Serve's autoscaler: 2 replicas at the start, a
        # target of 8 open sessions per replica, so 8 sessions need 1: once the downscale delay has
        # passed Serve removes one while all 8 are live. First, because Serve honours initial_replicas
        # only on an application's first deployment (a redeploy is a new version: it replaces replicas)
        from susurrus.server.ray_serve import ScaleOptions

        print(f"scale-down: autoscaling 2 -> 1 replica during {n} live sessions ...", file=sys.stderr)
        t = time.perf_counter()
        cluster.deploy(2, args.grace_s, args.drain_s, args.sessions_per_replica, ScaleOptions(
            sessions_per_replica=args.sessions_per_replica, target_sessions=float(n), min_replicas=1, max_replicas=2,
            initial_replicas=2, upscale_delay_s=600.0, downscale_delay_s=args.downscale_delay_s))
        cluster.wait_running(2)
        deployed = time.perf_counter() - t
        url = f"ws://127.0.0.1:{cluster.http_port}/v1/realtime"
        nodes_tree = [p.pid for p in cluster.nodes]
        names = {r["id"]: f"replica {k + 1} (node {r['node'][:6]}, pid {r['pid']})"
                 for k, r in enumerate(cluster.running())}
        down_sessions = [Session(name, pcm) for name, pcm in longs]
        opened_at = down_at = 0.0
        stopping: set[str] = set()

        async def down_phase() -> None:
            nonlocal opened_at, down_at
            running = asyncio.create_task(run_many(url, down_sessions, stagger_s=0.2))
            opened_at = time.perf_counter()
            while not running.done() and not stopping:
                for r in await asyncio.to_thread(cluster.replicas):
                    if r["state"].endswith("STOPPING"):
                        stopping.add(r["id"])
                        down_at = time.perf_counter()
                await asyncio.sleep(0.5)
            await running

        asyncio.run(down_phase())

        # the other phases on a fixed 2-replica deployment (a new version: Serve replaces the replicas)
        cluster.deploy(2, args.grace_s, args.drain_s, args.sessions_per_replica)
        cluster.wait_running(2)
        reps = cluster.running()
        for r in reps:
            names.setdefault(r["id"], f"replica {len(names) + 1} (node {r['node'][:6]}, pid {r['pid']})")

        # 3. spread
        print(f"spread: {n} sessions on 2 replicas ...", file=sys.stderr)
        spread = [Session(name, pcm) for name, pcm in shorts]
        import psutil

        procs = tree(nodes_tree)
        replica_procs = {r["id"]: psutil.Process(r["pid"]) for r in reps}
        replica_cpu0 = {rid: cpu_s([p]) for rid, p in replica_procs.items()}
        cpu0, t0 = cpu_s(procs), time.perf_counter()
        load0 = os.getloadavg()[0]
        asyncio.run(run_many(url, spread))
        spread_wall = time.perf_counter() - t0
        spread_cpu, spread_rss = cpu_s(tree(nodes_tree)) - cpu0, rss_mb(tree(nodes_tree))
        replica_cpu = {rid: cpu_s([p]) - replica_cpu0[rid] for rid, p in replica_procs.items()}
        replica_rss = {rid: rss_mb([p]) for rid, p in replica_procs.items()}
        load1 = os.getloadavg()[0]

        # 4. kill one replica mid-stream
        print(f"kill: {n} sessions, one replica killed after {args.kill_after_s:g} s ...", file=sys.stderr)
        before = cluster.running()
        kill_sessions = [Session(name, pcm) for name, pcm in shorts]
        after_sessions = [Session(f"after-kill {name}", pcm) for name, pcm in shorts[:2]]
        victim: dict = {}
        killed_at = 0.0

        async def kill_phase() -> None:
            nonlocal victim, killed_at
            running = asyncio.create_task(run_many(url, kill_sessions, stagger_s=0.2))
            await asyncio.sleep(args.kill_after_s)
            holders = {s.replica for s in kill_sessions if s.opened}
            victim = next(r for r in before if r["id"] in holders)
            os.kill(victim["pid"], signal.SIGKILL)
            killed_at = time.perf_counter()
            await asyncio.sleep(1.0)
            await run_many(url, after_sessions, stagger_s=0.2)
            await running

        asyncio.run(kill_phase())
        cluster.wait_running(2)  # Serve replaces the dead replica
        recovered_total = time.perf_counter() - killed_at
        reps = cluster.running()
        for r in reps:
            names.setdefault(r["id"], f"replica {len(names) + 1} (node {r['node'][:6]}, pid {r['pid']}, replacement)")

        print("flow control: one session sends a recording at once ...", file=sys.stderr)
        asyncio.run(run_session(url, fast_ray, 300))
    finally:
        cluster.stop()

    # ------------------------------------------------------------------ report
    audio_s = sum(len(p) for _, p in shorts) / RATE
    report.append(f"\n{n} real-time sessions (24 kHz PCM16, 100 ms appends), tiny.en, 1 torch thread per replica / "
                  f"worker, {args.sessions_per_replica} sessions per replica at most; 2-node Ray cluster on this "
                  f"machine: started in {started:.0f} s, 2 replicas deployed in "
                  f"{deployed:.0f} s\n")
    report.append("| phase | where | sessions | completed | words | word latency mean / p90 s |")
    report.append("|---|---|---|---|---|---|")
    if plain:
        report += latency_rows("plain serve --workers 2", plain_sessions, {"plain": "1 server, 2 worker processes"})
    report += latency_rows("ray spread", spread, names)
    report.append("")
    from susurrus.server.ray_serve import capacity

    report.append(f"load average during the spread phase: {load0:.1f} -> {load1:.1f} on {os.cpu_count()} cores "
                  "(other jobs share this machine)")
    if plain:
        cost = plain["cpu"] / audio_s
        report.append(f"plain serve: CPU {plain['cpu']:.1f} s over {plain['wall']:.0f} s for {audio_s:.0f} s of audio "
                      f"({cost:.3f} core-s per audio-s), RSS {plain['rss']:.0f} MB (server + 2 workers)")
    report.append(f"ray cluster: CPU {spread_cpu:.1f} s over {spread_wall:.0f} s for the same audio "
                  f"({spread_cpu / audio_s:.3f} core-s per audio-s), RSS {spread_rss:.0f} MB (2 nodes: GCS, raylets, "
                  "Serve controller and proxy, 2 replicas, idle workers)")
    for rid in replica_cpu:
        audio_here = sum(len(x.pcm) for x in spread if x.replica == rid) / RATE
        if audio_here:
            cost = replica_cpu[rid] / audio_here
            report.append(f"  {names[rid]}: CPU {replica_cpu[rid]:.1f} s for {audio_here:.0f} s of audio = {cost:.3f} "
                          f"core-s per audio-s -> a 1-core replica at 75 % busy carries {capacity(cost)} sessions; "
                          f"RSS {replica_rss[rid]:.0f} MB")

    report.append(f"\nkill: replica {names.get(victim.get('id', ''), victim)} SIGKILLed {args.kill_after_s:g} s in; "
                  f"Serve had 2 running replicas again {recovered_total:.0f} s after the kill\n")
    report.append("| session | replica | outcome | audio sent s | ended s after the kill |")
    report.append("|---|---|---|---|---|")
    for s in kill_sessions + after_sessions:
        report.append(f"| {s.name} | {names.get(s.replica, s.replica)} | {s.outcome} | {s.audio_sent_s:.1f} | "
                      f"{s.ended_at - killed_at:.1f} |")
    on_victim = [s for s in kill_sessions if s.replica == victim.get("id")]
    others = [s for s in kill_sessions if s.replica != victim.get("id")]
    report.append(f"\nfailures on kill: {sum(not s.completed for s in on_victim)}/{len(on_victim)} sessions of the "
                  f"killed replica failed ({sum(s.hung for s in on_victim)} hung); "
                  f"{sum(s.completed for s in others)}/{len(others)} of the other completed; new sessions after "
                  f"the kill: "
                  f"{sum(s.completed for s in after_sessions)}/{len(after_sessions)} completed, on "
                  f"{sorted({names.get(s.replica, s.replica) for s in after_sessions})}")

    live = sum(1 for s in down_sessions if s.ended_at > down_at) if down_at else 0
    report.append(f"\nscale-down: Serve's autoscaler (target {n} sessions per replica, downscale delay "
                  f"{args.downscale_delay_s:g} s) began removing {sorted(names.get(r, r) for r in stopping)} "
                  f"{down_at - opened_at:.1f} s after the sessions opened, with {live} of them live; replica grace "
                  f"{args.grace_s:g} s, drain {args.drain_s:g} s\n")
    report.append("| session | audio s | replica | removed replica | outcome | audio sent s | last word ends at s "
                  "| ended s after scale-down |")
    report.append("|---|---|---|---|---|---|---|---|")
    for s in down_sessions:
        report.append(f"| {s.name} | {len(s.pcm) / RATE:.1f} | {names.get(s.replica, s.replica)} | "
                      f"{'yes' if s.replica in stopping else 'no'} | {s.outcome} | {s.audio_sent_s:.1f} | "
                      f"{s.last_word_end:.1f} | {s.ended_at - down_at:.1f} |")
    on_removed = [s for s in down_sessions if s.replica in stopping]
    report.append(f"\ncompleted during scale-down: {sum(s.completed for s in down_sessions)}/{len(down_sessions)} "
                  f"({sum(s.completed for s in on_removed)}/{len(on_removed)} on the removed replica, of which "
                  f"{sum(s.close_code == 1012 for s in on_removed)} drained: completed, then close 1012)")
    report.append(f"\nflow control: one session sends {len(fast_ray.pcm) / RATE:.0f} s of audio as fast as the "
                  "connection takes it "
                  "(--max-buffered-s 20 on both servers)\n")
    report.append("| server | all audio sent after s | completed after s | outcome |")
    report.append("|---|---|---|---|")
    for label, s in (("plain serve", fast_plain), ("ray serve (1 replica)", fast_ray)):
        if s.started_at:
            report.append(f"| {label} | {s.all_sent_at - s.started_at:.1f} | {s.ended_at - s.started_at:.1f} | "
                          f"{s.outcome} |")
    print("\n".join(report))


if __name__ == "__main__":
    main()
