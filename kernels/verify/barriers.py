"""Explicit-state model checking of an mbarrier protocol (:class:`ceiling.verify.ttgir.Protocol`):
every interleaving of the partitions' events and of the TMA engine's landings, breadth first, so a
violation comes with a shortest trace. An mbarrier is (pending arrivals, transaction bytes, completed
phases); ``wait(parity)`` passes once ``completed & 1 != parity``; ``expect`` adds bytes and
arrives; a landing subtracts its box's bytes; the phase completes when both reach zero. Checked:
no deadlock; no read (plain, wgmma or TMA store) of a slot whose load is in flight or that nothing
filled; no load into a slot a wgmma or TMA store still reads, whose previous load is in flight, or
whose current contents a partition that reads the slot has not read yet (an overwrite before every
consumer released it); no plain write racing a load or an unretired read; no more arrivals than a
barrier's count and no more bytes landing than expected (a shortfall is a deadlock)."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from ceiling.verify.ttgir import Event, Protocol


class Violation(Exception):
    pass


@dataclass
class Verdict:
    ok: bool
    states: int
    kind: str = ""
    message: str = ""
    trace: list | None = None

    def counterexample(self) -> dict:
        return {"violation": self.kind, "message": self.message, "trace": self.trace, "states": self.states}


def check(proto: Protocol, max_states: int = 1_500_000, reduce: bool = True) -> Verdict:
    """Every interleaving of ``proto``: a verdict with the number of states, or the first violation
    with the events that lead to it (``"partition: event"``; ``"tma: lands ..."`` for the engine)."""
    names = [n for n, _ in proto.partitions]
    programs = [evs for _, evs in proto.partitions]
    bar_ids = {b: i for i, b in enumerate(proto.barriers)}
    counts = [proto.barriers[b] for b in proto.barriers]
    slot_ids: dict = {}
    readers_of: dict = {}
    for p, evs in enumerate(programs):
        for e in evs:
            for s in e.slots:
                slot_ids.setdefault(s, len(slot_ids))
                if e.kind in ("read", "mma", "store"):
                    readers_of.setdefault(s, set()).add(p)
            if e.bar is not None and e.bar not in bar_ids:
                return Verdict(False, 0, "uninitialized barrier", f"{names[p]}: {e} uses a barrier never initialized",
                               [])
    consumers = {slot_ids[s]: frozenset(ps) for s, ps in readers_of.items()}
    # A slot only one partition ever touches (no other partition reads, writes or loads it): that
    # partition's events on it commute with every other partition's and with every landing (a load
    # into it would be another touch), so they are taken alone (a persistent set; the state graph
    # is acyclic, the partition's own order is kept, deadlocks and violations are all still reached).
    touched: dict = {}
    for p, evs in enumerate(programs):
        for e in evs:
            for x in e.slots:
                touched.setdefault(slot_ids[x], set()).add(p)
    private = {i: next(iter(ps)) for i, ps in touched.items() if len(ps) == 1}
    slot_names = {i: s for s, i in slot_ids.items()}
    # For the read reduction below: where each partition next loads or writes each slot, where its
    # waits are, and how many arrivals it still makes on each barrier from each point on.
    touches = [{} for _ in programs]
    waits = [[] for _ in programs]
    arrivals_left = [[[0] * (len(evs) + 1) for _ in counts] for evs in programs]
    for q, evs in enumerate(programs):
        for i, e in enumerate(evs):
            if e.kind in ("load", "write"):
                touches[q].setdefault(slot_ids[e.slots[0]], []).append(i)
            elif e.kind == "wait":
                waits[q].append(i)
        for b in range(len(counts)):
            left = arrivals_left[q][b]
            for i in range(len(evs) - 1, -1, -1):
                e = evs[i]
                mine = e.bar is not None and bar_ids.get(e.bar) == b
                made = (e.value if e.kind == "arrive" else 1 if e.kind == "expect" else 0) if mine else 0
                left[i] = left[i + 1] + made

    # state: (pcs, bars((pending, tx, phase)...), inflight((slot, bar, bytes)...), mma per partition,
    #         stores per partition, slots((full, readers)...))
    init = (tuple(0 for _ in programs), tuple((c, 0, 0) for c in counts), (),
            tuple(() for _ in programs), tuple(() for _ in programs),
            tuple((False, frozenset()) for _ in slot_ids))
    parent = {init: None}
    queue = deque([init])

    def show(label) -> str:
        """A move as text: ("p", partition, pc) or ("tma", slot)."""
        if label[0] == "tma":
            return f"tma: lands in {sname(label[1])}"
        return f"{names[label[1]]}: {programs[label[1]][label[2]]}"

    def trace(state, last=None):
        out = []
        while parent[state] is not None:
            state, label = parent[state]
            out.append(show(label))
        out.reverse()
        if last:
            out.append(last)
        return out

    def sname(i):
        s = slot_names[i]
        return f"{s[0]}[{','.join(map(str, s[1:]))}]"

    def arrive(bars, b, n, what):
        pending, tx, phase = bars[b]
        pending -= n
        if pending < 0:
            raise Violation("too many arrivals", f"{what()}: more arrivals than the barrier's count in one phase")
        if pending == 0 and tx == 0:
            pending, phase = counts[b], phase + 1
        bars[b] = (pending, tx, phase)

    def outstanding(mma, stores, slot):
        return [names[q] for q in range(len(programs))
                if any(slot in g for g in mma[q]) or slot in stores[q]]

    def step(state, p):
        """The successor of ``state`` when partition p takes its next event (None: blocked)."""
        pcs, bars, inflight, mma, stores, slots = state
        e: Event = programs[p][pcs[p]]
        bars, mma, stores, slots = list(bars), list(mma), list(stores), list(slots)
        inflight = list(inflight)
        def what():
            return f"{names[p]}: {e}"
        if e.kind == "wait":
            if (bars[bar_ids[e.bar]][2] & 1) == e.value:
                return None
        elif e.kind == "arrive":
            arrive(bars, bar_ids[e.bar], e.value, what)
        elif e.kind == "expect":
            b = bar_ids[e.bar]
            pending, tx, phase = bars[b]
            bars[b] = (pending, tx + e.value, phase)
            arrive(bars, b, 1, what)
        elif e.kind == "load":
            s = slot_ids[e.slots[0]]
            if any(f[0] == s for f in inflight):
                raise Violation("early overwrite",
                                f"{what()}: loads into {sname(s)} while its previous load is in flight")
            busy = outstanding(mma, stores, s)
            if busy:
                raise Violation("early overwrite", f"{what()}: overwrites {sname(s)} while {busy} still read it")
            full, readers = slots[s]
            missing = consumers.get(s, frozenset()) - readers
            if full and missing:
                raise Violation("early overwrite", f"{what()}: overwrites {sname(s)} before "
                                f"{[names[q] for q in sorted(missing)]} read its contents")
            inflight.append((s, bar_ids[e.bar], e.value))
            inflight.sort()
            slots[s] = (False, frozenset())
        elif e.kind in ("read", "mma", "store"):
            for slot in e.slots:
                s = slot_ids[slot]
                if any(f[0] == s for f in inflight):
                    raise Violation("read before load", f"{what()}: reads {sname(s)} while its TMA load is in flight")
                if not slots[s][0]:
                    raise Violation("read before load", f"{what()}: reads {sname(s)}, which no completed load or "
                                    "store has filled")
                slots[s] = (True, slots[s][1] | {p})
            ids = tuple(slot_ids[x] for x in e.slots)
            if e.kind == "mma":
                mma[p] = mma[p] + (ids,)
            elif e.kind == "store":
                stores[p] = stores[p] + ids
        elif e.kind == "mma_wait":
            mma[p] = mma[p][len(mma[p]) - e.value:] if e.value else ()
        elif e.kind == "store_wait":
            stores[p] = stores[p][len(stores[p]) - e.value:] if e.value else ()
        elif e.kind == "write":
            s = slot_ids[e.slots[0]]
            if any(f[0] == s for f in inflight):
                raise Violation("early overwrite", f"{what()}: writes {sname(s)} while a TMA load into it is in flight")
            busy = outstanding(mma, stores, s)
            if busy:
                raise Violation("early overwrite", f"{what()}: writes {sname(s)} while {busy} still read it")
            slots[s] = (True, frozenset())
        pcs = pcs[:p] + (pcs[p] + 1,) + pcs[p + 1:]
        return (pcs, tuple(bars), tuple(inflight), tuple(mma), tuple(stores), tuple(slots))

    def land(state, i):
        pcs, bars, inflight, mma, stores, slots = state
        s, b, nbytes = inflight[i]
        bars, slots = list(bars), list(slots)
        pending, tx, phase = bars[b]
        tx -= nbytes
        if tx < 0:
            raise Violation("tx bytes", f"tma: the load into {sname(s)} lands {nbytes} bytes on a barrier "
                            f"expecting {tx + nbytes} (more bytes than the expect announced)")
        if pending == 0 and tx == 0:
            pending, phase = counts[b], phase + 1
        bars[b] = (pending, tx, phase)
        slots[s] = (True, frozenset())
        return (pcs, tuple(bars), inflight[:i] + inflight[i + 1:], mma, stores, tuple(slots))

    def held_back(state, p, q, slot) -> bool:
        """Whether partition q cannot load or write ``slot`` before p moves: it has no such event
        left, or before it q waits on a barrier whose phase is not complete and cannot complete
        without an arrival of p (more arrivals pending than all the other partitions still make)."""
        pcs, bars = state[0], state[1]
        at = touches[q].get(slot, ())
        k = bisect_left(at, pcs[q])
        if k == len(at):
            return True
        j = at[k]
        qwaits = waits[q]
        for w in range(bisect_left(qwaits, pcs[q]), len(qwaits)):
            i = qwaits[w]
            if i >= j:
                break
            e = programs[q][i]
            b = bar_ids[e.bar]
            pending, _, phase = bars[b]
            if (phase & 1) == e.value:
                others = sum(arrivals_left[r][b][pcs[r]] for r in range(len(programs)) if r != p)
                if pending > others:
                    return True
        return False

    def alone(state, p) -> bool:
        """Whether p's next event can be taken alone: it touches only p's own slots, or it reads
        (or retires reads of) slots that no other partition can load or write before p moves
        (a persistent set: every event another partition can take first is independent of it)."""
        if not reduce:
            return False
        pcs, mma, stores = state[0], state[3], state[4]
        e = programs[p][pcs[p]]
        if e.kind == "write":
            return all(private.get(slot_ids[x]) == p for x in e.slots)
        if e.kind in ("read", "mma", "store"):
            slots = [slot_ids[x] for x in e.slots]
        elif e.kind == "mma_wait":
            retired = mma[p][:len(mma[p]) - e.value] if e.value else mma[p]
            slots = [i for g in retired for i in g]
        elif e.kind == "store_wait":
            slots = list(stores[p][:len(stores[p]) - e.value] if e.value else stores[p])
        else:
            return False
        return all(private.get(i) == p or all(held_back(state, p, q, i) for q in range(len(programs)) if q != p)
                   for i in slots)

    while queue:
        state = queue.popleft()
        pcs, bars, inflight = state[0], state[1], state[2]
        moves = []
        try:
            solo = next((p for p in range(len(programs)) if pcs[p] < len(programs[p]) and alone(state, p)), None)
            if solo is not None:
                moves.append((step(state, solo), ("p", solo, pcs[solo])))
            for p in ([] if solo is not None else range(len(programs))):
                if pcs[p] < len(programs[p]):
                    nxt = step(state, p)
                    if nxt is not None:
                        moves.append((nxt, ("p", p, pcs[p])))
            for i in ([] if solo is not None else range(len(inflight))):
                if i and inflight[i] == inflight[i - 1]:
                    continue
                moves.append((land(state, i), ("tma", inflight[i][0])))
        except Violation as v:
            return Verdict(False, len(parent), v.args[0], v.args[1], trace(state, v.args[1]))
        if not moves and any(pcs[p] < len(programs[p]) for p in range(len(programs))):
            blocked = [f"{names[p]} at {programs[p][pcs[p]]}" for p in range(len(programs))
                       if pcs[p] < len(programs[p])]
            owed = [f"{b[0]}[{','.join(map(str, b[1:]))}] awaits {bars[i][1]} bytes"
                    for b, i in bar_ids.items() if bars[i][1] > 0]
            return Verdict(False, len(parent), "deadlock", "blocked: " + "; ".join(blocked)
                           + ("" if not owed else "; " + "; ".join(owed)), trace(state))
        for nxt, label in moves:
            if nxt not in parent:
                parent[nxt] = (state, label)
                if len(parent) > max_states:
                    return Verdict(False, len(parent), "state bound", f"more than {max_states} states")
                queue.append(nxt)
    return Verdict(True, len(parent))
