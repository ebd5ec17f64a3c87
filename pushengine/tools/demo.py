"""``--demo``: a producer inside the process that keeps a fake site alive.

It starts streams (mostly public and live), updates viewers and titles, ends
live streams and deletes old ended ones, a few changes a second, through the
same feed as everything else, so the example pages change by themselves. Its
users are User objects too (a name and an avatar: their initials on a colour,
as a small SVG ``data:`` URL), published first and renamed now and then, so
that the pages' user cache has something to load and to refresh.
"""
from __future__ import annotations

import random
import time as _time
from urllib.parse import quote

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pushengine.core.changes import DELETE, UPSERT, Change
from pushengine.core.interfaces import ChangeFeed

log = Logger()

WORDS = ["кошки", "котик", "собака", "музыка", "концерт", "футбол", "игра", "новости",
         "погода", "кухня", "рецепт", "cats", "kitten", "dogs", "music", "football",
         "gaming", "news", "cooking", "travel", "live", "стрим", "город", "дорога"]
USERS = {i: name for i, name in enumerate(
    ["anna", "boris", "vera", "gleb", "dasha", "egor", "zhenya", "ilya", "katya", "lev",
     "masha", "nikita", "olga", "pavel", "rita", "sergey", "tanya", "ulyana", "fedor",
     "yana"], start=340690)}
SURNAMES = ["Petrova", "Ivanov", "Smirnova", "Kuznetsov", "Popova", "Sokolov", "Lebedeva",
            "Kozlov", "Novikova", "Morozov", "Volkova", "Orlov"]
RENAME_CHANCE = 0.03     # of a step: one user takes another surname
PLACES = [(55.7558, 37.6173), (59.9343, 30.3351), (56.8389, 60.6057), (51.5072, -0.1276),
          (52.5200, 13.4050), (40.7128, -74.0060)]


def iso(ts: float) -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(ts))


def avatar(user_id: int, name: str) -> str:
    """A round avatar: the name's initials on a colour of the user's own, as
    an SVG ``data:`` URL of a few hundred bytes."""
    initials = "".join(part[0] for part in name.split()[:2]).upper() or "?"
    hue = (user_id * 137) % 360
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='64' height='64' "
           f"viewBox='0 0 64 64'><circle cx='32' cy='32' r='32' fill='hsl({hue},55%,42%)'/>"
           f"<text x='32' y='41' font-family='sans-serif' font-size='24' font-weight='600' "
           f"fill='white' text-anchor='middle'>{initials}</text></svg>")
    return "data:image/svg+xml," + quote(svg, safe="/:='(),")


def user_object(user_id: int, name: str) -> dict:
    return {"id": user_id, "name": name, "avatar": avatar(user_id, name),
            "login": USERS[user_id], "created_at": "2026-01-01T00:00:00Z"}


class DemoProducer:
    """Call ``tick()`` a few times a second (a TimerService does)."""

    def __init__(self, clock: IReactorTime, feed: ChangeFeed, seed: int | None = None,
                 live_target: int = 12, ended_keep: int = 40) -> None:
        self.clock = clock
        self.feed = feed
        self.rng = random.Random(seed)
        self.live: dict[int, dict] = {}
        self.ended: list[dict] = []
        self.next_id = 1000
        self.live_target = live_target
        self.ended_keep = ended_keep
        self.users = {uid: user_object(uid, f"{login.capitalize()} {SURNAMES[i % len(SURNAMES)]}")
                      for i, (uid, login) in enumerate(USERS.items())}
        self.users_sent = False
        self.renames = 0

    def rename(self) -> Change:
        """One user takes another surname (and so another avatar)."""
        uid = self.rng.choice(list(self.users))
        first, _, surname = self.users[uid]["name"].partition(" ")
        surname = self.rng.choice([s for s in SURNAMES if s != surname])
        self.users[uid] = user_object(uid, f"{first} {surname}")
        self.renames += 1
        return Change("User", UPSERT, uid, self.users[uid])

    def _title(self) -> str:
        return " ".join(self.rng.sample(WORDS, self.rng.randint(2, 4))).capitalize()

    def _new_stream(self) -> dict:
        self.next_id += 1
        user = self.rng.choice(list(USERS))
        lat, lon = self.rng.choice(PLACES)
        public = self.rng.random() > 0.1
        obj = {"id": self.next_id, "title": self._title(), "user_id": user,
               "user_name": USERS[user], "live": True, "public": public,
               "created_at": iso(self.clock.seconds()), "ended_at": None, "duration": 0,
               "viewers": self.rng.randint(0, 20), "thumbnail": None,
               "lat": round(lat + self.rng.uniform(-0.2, 0.2), 4),
               "lon": round(lon + self.rng.uniform(-0.2, 0.2), 4)}
        if not public:
            obj["allowed_users"] = self.rng.sample(list(USERS), 2)
        return obj

    def step(self) -> list[Change]:
        """Choose the next change(s) of the fake site."""
        if not self.users_sent:
            self.users_sent = True
            return [Change("User", UPSERT, uid, u) for uid, u in self.users.items()]
        if self.rng.random() < RENAME_CHANCE:
            return [self.rename()]
        now = self.clock.seconds()
        roll = self.rng.random()
        if len(self.live) < self.live_target and roll < 0.5 or not self.live:
            obj = self._new_stream()
            self.live[obj["id"]] = obj
            return [Change("Stream", UPSERT, obj["id"], obj)]
        if roll < 0.8:
            obj = dict(self.rng.choice(list(self.live.values())))
            obj["viewers"] = max(0, obj["viewers"] + self.rng.randint(-3, 8))
            if self.rng.random() < 0.15:
                obj["title"] = self._title()
            self.live[obj["id"]] = obj
            return [Change("Stream", UPSERT, obj["id"], obj)]
        obj = dict(self.live.pop(self.rng.choice(list(self.live))))
        started = _time.mktime(_time.strptime(obj["created_at"], "%Y-%m-%dT%H:%M:%SZ")) \
            - _time.timezone
        obj.update(live=False, ended_at=iso(now), duration=max(0, int(now - started)))
        self.ended.append(obj)
        changes = [Change("Stream", UPSERT, obj["id"], obj)]
        while len(self.ended) > self.ended_keep:
            old = self.ended.pop(0)
            changes.append(Change("Stream", DELETE, old["id"], {"id": old["id"]}))
        return changes

    def tick(self) -> Deferred | None:
        try:
            d = self.feed.publish(self.step())
        except Exception:
            log.failure("the demo producer failed")
            return None
        d.addErrback(lambda f: log.failure("the demo producer could not publish", f))
        return d
