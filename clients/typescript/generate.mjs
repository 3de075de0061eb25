// Write events.d.ts from the schema document on stdin (`python -m events.typescript`).
//
//   npm run generate            (from clients/typescript; PYTHON=… picks the interpreter)
//   python -m events.typescript | node clients/typescript/generate.mjs clients/typescript/events.d.ts
//
// The file is written only once the whole output is ready, so a failed run never leaves
// a truncated events.d.ts behind.
import { readFileSync, writeFileSync } from "node:fs";
import { compile } from "json-schema-to-typescript";

const out = process.argv[2];
if (!out) {
  console.error("usage: python -m events.typescript | node generate.mjs <out.d.ts>");
  process.exit(2);
}
const schema = JSON.parse(readFileSync(0, "utf8"));
const banner = [
  "/* eslint-disable */",
  "/**",
  " * The agent chat's SSE events: `AgentEvent` is the union of `{event, data}` pairs",
  " * (narrow it with `switch (e.event)`); `AgentEventMap` gives each event's data by name.",
  " * Clients must ignore events whose name they do not know.",
  " *",
  " * GENERATED from the Python `events` package by clients/typescript/generate.mjs",
  " * (`npm run generate` in clients/typescript). Do not edit by hand.",
  " */",
].join("\n");
const ts = await compile(schema, "AgentEvent", {
  bannerComment: banner,
  additionalProperties: false, // no `[k: string]: unknown` on every interface
  unreachableDefinitions: true, // every $defs entry, referenced or not
  format: true,
});
// Derived in TypeScript itself, so they can never disagree with the union.
const derived = `
/** Every event name this version knows. */
export type AgentEventName = AgentEvent["event"];
/** Each event's data by name: \`AgentEventMap["content_chunk"]\` is \`ContentChunk\`. */
export type AgentEventMap = { [E in AgentEvent as E["event"]]: E["data"] };
`;
writeFileSync(out, ts + derived);
