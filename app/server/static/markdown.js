// A small, careful Markdown renderer for model answers: it builds DOM nodes and never
// parses HTML. Every piece of the source text ends up in a text node, so `<script>`,
// `<img onerror=…>` and friends are shown as the characters they are.
//
// Supported: paragraphs, headings, bullet and numbered lists, block quotes, fenced and
// inline code, GFM tables (a header row, the alignment row, body rows; each cell rendered
// inline), **bold**, *italic*, [links](https://…) and <https://…> / bare URLs (only
// http and https become links), and `[doc#n]` citations (handed to a callback that
// returns the node to show, or null to keep the text).
"use strict";

(() => {
  function safeHref(url) {
    if (typeof url !== "string" || !url) return null;
    try {
      const parsed = new URL(url, window.location.href);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch {
      return null;
    }
  }

  function link(href, children) {
    const a = document.createElement("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    a.append(...children);
    return a;
  }

  function wrap(tag, children) {
    const node = document.createElement(tag);
    node.append(...children);
    return node;
  }

  // Earliest match wins; alternatives are tried in this order at the same position.
  const INLINE = [
    ["code", /`([^`\n]+)`/g],
    ["link", /\[([^\[\]\n]+)\]\(([^()\s]+)\)/g],
    ["cite", /\[([^\[\]\n]*#[^\[\]\n]*)\]/g],
    ["autolink", /<(https?:\/\/[^\s<>]+)>/g],
    ["url", /\bhttps?:\/\/[^\s<>()\[\]]+[^\s<>()\[\].,;:!?'"]/g],
    ["strong", /\*\*(?=\S)([^\n]*?\S)\*\*|__(?=\S)([^\n]*?\S)__(?!\w)/g],
    ["em", /\*(?=[^\s*])([^*\n]*?[^\s*])\*|(?<!\w)_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g],
  ];

  function inline(text, opts, depth = 0) {
    const out = [];
    let pos = 0;
    while (pos < text.length) {
      let best = null;
      for (const [kind, re] of INLINE) {
        if (depth > 0 && (kind === "link" || kind === "autolink" || kind === "url") && opts.inLink) continue;
        re.lastIndex = pos;
        const m = re.exec(text);
        if (m && (!best || m.index < best.m.index)) best = { kind, m };
      }
      if (!best) break;
      const { kind, m } = best;
      if (m.index > pos) out.push(document.createTextNode(text.slice(pos, m.index)));
      out.push(...token(kind, m, opts, depth));
      pos = m.index + m[0].length;
    }
    if (pos < text.length) out.push(document.createTextNode(text.slice(pos)));
    return out;
  }

  function token(kind, m, opts, depth) {
    const inner = (s) => (depth > 8 ? [document.createTextNode(s)] : inline(s, opts, depth + 1));
    switch (kind) {
      case "code":
        return [wrap("code", [document.createTextNode(m[1])])];
      case "link": {
        const href = safeHref(m[2]);
        if (!href || opts.inLink) return inner(m[1]);
        return [link(href, inline(m[1], { ...opts, inLink: true }, depth + 1))];
      }
      case "autolink":
      case "url": {
        const url = m[1] || m[0];
        const href = safeHref(url);
        return href && !opts.inLink ? [link(href, [document.createTextNode(url)])] : [document.createTextNode(m[0])];
      }
      case "cite": {
        const ids = m[1].split(/[,;]\s*/).map((s) => s.trim()).filter(Boolean);
        const nodes = ids.map((id) => (opts.cite ? opts.cite(id) : null));
        if (!nodes.some(Boolean)) return [document.createTextNode(m[0])];
        const out = [];
        nodes.forEach((node, i) => out.push(node || document.createTextNode(`[${ids[i]}]`)));
        return out;
      }
      case "strong":
        return [wrap("strong", inner(m[1] ?? m[2]))];
      case "em":
        return [wrap("em", inner(m[1] ?? m[2]))];
      default:
        return [document.createTextNode(m[0])];
    }
  }

  const FENCE = /^\s{0,3}(```|~~~)/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const NUMBER = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;
  const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;

  const TABLE_RULE = /^\s{0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  /** A table row's cells: split on pipes that are not escaped (`\|` is a pipe in a
   *  cell, as GFM has it, also inside code), the outer pipes dropped. */
  function cells(line) {
    let text = line.trim();
    if (text.startsWith("|")) text = text.slice(1);
    if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
    const out = [];
    let cell = "";
    for (let i = 0; i < text.length; i++) {
      if (text[i] === "\\" && text[i + 1] === "|") {
        cell += "|";
        i++;
      } else if (text[i] === "|") {
        out.push(cell.trim());
        cell = "";
      } else {
        cell += text[i];
      }
    }
    out.push(cell.trim());
    return out;
  }

  /** The table starting at lines[i], or null: a header row with a pipe, then an
   *  alignment row with as many cells. Returns {node, next}. */
  function table(lines, i, opts) {
    const head = lines[i];
    const rule = lines[i + 1];
    if (!head.includes("|") || rule === undefined || !TABLE_RULE.test(rule) || !rule.includes("-")) return null;
    const names = cells(head);
    const aligns = cells(rule).map((c) => {
      const left = c.startsWith(":");
      const right = c.endsWith(":");
      return left && right ? "center" : right ? "right" : left ? "left" : "";
    });
    if (names.length !== aligns.length) return null;
    const cell = (tag, text, k) => {
      const node = wrap(tag, inline(text, opts));
      if (aligns[k]) node.className = `align-${aligns[k]}`;
      return node;
    };
    const thead = wrap("thead", [wrap("tr", names.map((n, k) => cell("th", n, k)))]);
    const rows = [];
    let j = i + 2;
    while (j < lines.length && lines[j].trim() && lines[j].includes("|") && !FENCE.test(lines[j])) {
      const row = cells(lines[j]);
      rows.push(wrap("tr", names.map((_, k) => cell("td", row[k] ?? "", k))));
      j++;
    }
    const node = wrap("div", [wrap("table", rows.length ? [thead, wrap("tbody", rows)] : [thead])]);
    node.className = "table-wrap"; // a wide table scrolls inside the answer, not the page
    return { node, next: j };
  }

  /** Render `text` as a DocumentFragment. opts.cite(id) → Node | null. */
  function render(text, opts = {}) {
    const frag = document.createDocumentFragment();
    const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    const para = (buf) => {
      if (buf.length) frag.append(wrap("p", inline(buf.join("\n"), opts)));
    };
    let buf = [];
    const flush = () => {
      para(buf);
      buf = [];
    };
    while (i < lines.length) {
      const line = lines[i];
      if (!line.trim()) {
        flush();
        i++;
        continue;
      }
      const fence = FENCE.exec(line);
      if (fence) {
        flush();
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
        i++; // the closing fence (or the end)
        frag.append(wrap("pre", [wrap("code", [document.createTextNode(body.join("\n"))])]));
        continue;
      }
      const grid = table(lines, i, opts);
      if (grid) {
        flush();
        frag.append(grid.node);
        i = grid.next;
        continue;
      }
      const heading = HEADING.exec(line);
      if (heading) {
        flush();
        const level = Math.min(heading[1].length + 2, 6); // the page owns h1–h2
        frag.append(wrap(`h${level}`, inline(heading[2], opts)));
        i++;
        continue;
      }
      if (RULE.test(line) && !buf.length) {
        frag.append(document.createElement("hr"));
        i++;
        continue;
      }
      const bullet = BULLET.exec(line);
      const number = NUMBER.exec(line);
      if (bullet || number) {
        flush();
        const ordered = !bullet;
        const list = document.createElement(ordered ? "ol" : "ul");
        if (ordered && number[1] !== "1") list.start = Number(number[1]);
        while (i < lines.length) {
          const m = ordered ? NUMBER.exec(lines[i]) : BULLET.exec(lines[i]);
          if (m) {
            list.append(wrap("li", inline(ordered ? m[2] : m[1], opts)));
          } else if (lines[i].trim() && /^\s+/.test(lines[i]) && list.lastChild) {
            list.lastChild.append(document.createTextNode(" "), ...inline(lines[i].trim(), opts));
          } else {
            break;
          }
          i++;
        }
        frag.append(list);
        continue;
      }
      const quote = QUOTE.exec(line);
      if (quote) {
        flush();
        const body = [];
        while (i < lines.length && QUOTE.exec(lines[i])) body.push(QUOTE.exec(lines[i++])[1]);
        frag.append(wrap("blockquote", [render(body.join("\n"), opts)]));
        continue;
      }
      buf.push(line);
      i++;
    }
    flush();
    return frag;
  }

  window.AgentMarkdown = Object.freeze({ render, safeHref });
})();
