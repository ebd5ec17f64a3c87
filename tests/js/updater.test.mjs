// updater.js: field formatting.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  parseTime, formatLocalTime, formatAgo, formatDuration, formatCount, plural, elapsedSeconds,
} from "../../static/js/updater.js";

const NOW = Date.parse("2026-11-30T12:00:00Z");

test("parseTime: ISO strings, seconds, milliseconds, junk", () => {
  assert.equal(parseTime("2026-11-30T03:00:00Z").getTime(), Date.parse("2026-11-30T03:00:00Z"));
  assert.equal(parseTime(1700000000).getTime(), 1700000000000);
  assert.equal(parseTime(1700000000123).getTime(), 1700000000123);
  assert.equal(parseTime(null), null);
  assert.equal(parseTime(""), null);
  assert.equal(parseTime("yesterday-ish"), null);
});

test("formatDuration is h:mm:ss", () => {
  assert.equal(formatDuration(0), "0:00:00");
  assert.equal(formatDuration(42), "0:00:42");
  assert.equal(formatDuration(3725), "1:02:05");
  assert.equal(formatDuration(93600), "26:00:00");
  assert.equal(formatDuration(59.9), "0:00:59");
  assert.equal(formatDuration(-5), "0:00:00");
  assert.equal(formatDuration(null), "");
  assert.equal(formatDuration("abc"), "");
});

test("formatAgo", () => {
  const ago = (s) => formatAgo(new Date(NOW - s * 1000).toISOString(), NOW);
  assert.equal(ago(0), "just now");
  assert.equal(ago(30), "just now");
  assert.equal(ago(60), "1 min ago");
  assert.equal(ago(5 * 60), "5 min ago");
  assert.equal(ago(59 * 60), "59 min ago");
  assert.equal(ago(2 * 3600 + 100), "2 h ago");
  assert.equal(ago(30 * 3600), "yesterday");
  assert.equal(ago(5 * 86400), "5 days ago");
  assert.equal(ago(-20), "just now", "a clock a little ahead");
  assert.equal(ago(-10 * 60), "in 10 min");
  assert.equal(formatAgo(null, NOW), "");
});

test("formatAgo of an old date gives the date", () => {
  const text = formatAgo("2025-01-02T10:00:00Z", NOW, { locale: "en-GB", timeZone: "UTC" });
  assert.equal(text, "2 Jan 2025, 10:00");
});

test("formatLocalTime converts UTC to the local zone", () => {
  const opts = { now: NOW, locale: "en-GB", timeZone: "Europe/Moscow" };
  assert.equal(formatLocalTime("2026-11-30T03:00:00Z", opts), "06:00");
  assert.equal(formatLocalTime("2026-11-29T03:00:00Z", opts), "29 Nov, 06:00");
  assert.equal(formatLocalTime("2025-11-29T03:00:00Z", opts), "29 Nov 2025, 06:00");
  // Late on the 29th in UTC is already the 30th in Moscow: "today".
  assert.equal(formatLocalTime("2026-11-29T22:30:00Z", opts), "01:30");
  assert.equal(formatLocalTime("2026-11-30T03:00:00Z", { ...opts, timeZone: "America/New_York" }), "29 Nov, 22:00");
  assert.equal(formatLocalTime("nonsense", opts), "");
});

test("formatCount and plural", () => {
  assert.equal(formatCount(0), "0");
  assert.equal(formatCount(999), "999");
  assert.equal(formatCount(1000), "1K");
  assert.equal(formatCount(1234), "1.2K");
  assert.equal(formatCount(1299), "1.2K");
  assert.equal(formatCount(12345), "12K");
  assert.equal(formatCount(999999), "999K");
  assert.equal(formatCount(1500000), "1.5M");
  assert.equal(formatCount(3.4e9), "3.4B");
  assert.equal(formatCount(-1500), "-1.5K");
  assert.equal(formatCount("x"), "");
  assert.equal(plural(1, "viewer", "viewers"), "1 viewer");
  assert.equal(plural(0, "viewer", "viewers"), "0 viewers");
  assert.equal(plural(2500, "viewer", "viewers"), "2.5K viewers");
});

test("elapsedSeconds", () => {
  assert.equal(elapsedSeconds("2026-11-30T11:00:00Z", NOW), 3600);
  assert.equal(elapsedSeconds("2026-11-30T13:00:00Z", NOW), 0);
  assert.equal(elapsedSeconds(null, NOW), 0);
});
