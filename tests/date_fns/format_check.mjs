// For each format string in the JSON array on stdin, whether date-fns' format accepts
// it: one JSON line a format, {"format", "ok", "error"?}, then {"kind": "done"}.
import { format } from "date-fns";
import { readFileSync } from "node:fs";

const formats = JSON.parse(readFileSync(0, "utf8"));
const date = new Date(2024, 0, 15, 13, 5, 9, 7);
console.warn = () => {}; // date-fns warns (and formats) on Y and D runs it does not refuse
for (const f of formats) {
  let line;
  try {
    format(date, f);
    line = { kind: "result", format: f, ok: true };
  } catch (e) {
    line = { kind: "result", format: f, ok: false, error: String(e.message).slice(0, 120) };
  }
  process.stdout.write(JSON.stringify(line) + "\n");
}
process.stdout.write(JSON.stringify({ kind: "done" }) + "\n");
