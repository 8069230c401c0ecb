// A small Markdown renderer for the playground's assistant text: fenced code (with a language
// class and a copy button), inline code, emphasis, links, headings, lists, quotes, tables.
// Safe by construction: every piece of the source is HTML-escaped before any markup is added,
// the markup added is a fixed set of tags, and links are kept only for http(s) and mailto.
// `Markdown.render(el, source)` re-renders as a stream grows, replacing only the top-level
// blocks whose HTML changed, so earlier paragraphs and code blocks do not flicker.
"use strict";

const Markdown = (() => {
  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const escape = (s) => s.replace(/[&<>"']/g, (c) => ESCAPES[c]);

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])(?:\s+(.*)|$)/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  const indentOf = (line) => line.length - line.trimStart().length;
  const blank = (line) => !line.trim();

  function safeUrl(url) {
    return /^(https?:\/\/|mailto:)/i.test(url) ? url : null;
  }

  // --- inline ----------------------------------------------------------------------------------

  // Code spans and links are cut out first (stashed behind \0n\0 markers) so nothing inside a
  // code span is markup; the rest is escaped, then emphasis is marked up on the escaped text.
  function inline(source) {
    const stash = [];
    const keep = (html) => `\u0000${stash.push(html) - 1}\u0000`;
    let text = source.replace(/\u0000/g, "");
    text = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) => keep(`<code>${escape(code.trim() || code)}</code>`));
    text = text.replace(/\[([^\]\n]+)\]\(\s*<?((?:[^\s()<>]|\([^\s()<>]*\))+)>?(?:\s+"[^"]*")?\s*\)/g, (whole, label, url) => {
      const href = safeUrl(url);
      const inner = emphasis(escape(label));
      return keep(href ? `<a href="${escape(href)}" target="_blank" rel="noopener noreferrer">${inner}</a>` : inner);
    });
    text = text.replace(/\bhttps?:\/\/[^\s<>()\u0000]*[^\s<>().,;:!?'"*_\u0000]/g, (url) =>
      keep(`<a href="${escape(url)}" target="_blank" rel="noopener noreferrer">${escape(url)}</a>`));
    let html = emphasis(escape(text)).replace(/ {2,}\n|\\\n|\n/g, "<br>");
    while (/\u0000\d+\u0000/.test(html)) html = html.replace(/\u0000(\d+)\u0000/g, (_, n) => stash[Number(n)]);
    return html;
  }

  function emphasis(html) {
    return html
      .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
      .replace(/\*(?=[^\s*])([^*]*?[^\s*])\*/g, "<em>$1</em>")
      .replace(/\*(?=[^\s*])([^*])\*/g, "<em>$1</em>")
      .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_]|[^\s_])_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
  }

  // --- blocks ----------------------------------------------------------------------------------

  function code(lang, text) {
    const name = lang.replace(/[^\w+#.-]/g, "").slice(0, 30);
    const cls = name ? ` class="language-${escape(name)}"` : "";
    return `<div class="code"><div class="code-head"><span class="lang">${escape(name)}</span>`
      + `<button type="button" class="copy" aria-label="Copy code">Copy</button></div>`
      + `<pre><code${cls}>${escape(text)}</code></pre></div>`;
  }

  function cells(row) {
    let t = row.trim();
    if (t.startsWith("|")) t = t.slice(1);
    if (t.endsWith("|") && !t.endsWith("\\|")) t = t.slice(0, -1);
    return t.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
  }

  function table(head, rule, rows) {
    const aligns = cells(rule).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : ""));
    const cell = (tag, text, i) => `<${tag}${aligns[i] ? ` style="text-align:${aligns[i]}"` : ""}>${inline(text)}</${tag}>`;
    const width = aligns.length;
    const row = (tag, r) => "<tr>" + Array.from({ length: width }, (_, i) => cell(tag, r[i] ?? "", i)).join("") + "</tr>";
    return `<div class="table"><table><thead>${row("th", cells(head))}</thead>`
      + `<tbody>${rows.map((r) => row("td", cells(r))).join("")}</tbody></table></div>`;
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
      || /^\s*([-*+]|1[.)])\s+\S/.test(line);
  }

  // One list (its nested lists are parsed again inside each item's body). Returns [html, next].
  function list(lines, i) {
    const first = ITEM.exec(lines[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const sibling = (line) => {
      const m = ITEM.exec(line);
      return m && m[1].length === indent && /\d/.test(m[2]) === ordered;
    };
    const items = [];
    let loose = false;
    while (i < lines.length && sibling(lines[i])) {
      const m = ITEM.exec(lines[i]);
      const body = [m[3] || ""];
      const contentIndent = m[1].length + m[2].length + 1;
      i += 1;
      while (i < lines.length) {
        const line = lines[i];
        if (blank(line)) {
          let j = i + 1;
          while (j < lines.length && blank(lines[j])) j += 1;
          if (j < lines.length && indentOf(lines[j]) > indent) { body.push(""); i += 1; continue; }
          if (j < lines.length && sibling(lines[j])) { loose = true; i = j; }
          break;
        }
        if (indentOf(line) > indent) { body.push(line.slice(Math.min(indentOf(line), contentIndent))); i += 1; continue; }
        if (ITEM.test(line) || startsBlock(line)) break;
        body.push(line); // a lazy continuation of the item's paragraph
        i += 1;
      }
      if (body.slice(0, -1).some(blank)) loose = true;
      items.push(body);
    }
    const start = ordered && parseInt(first[2], 10) !== 1 ? ` start="${parseInt(first[2], 10)}"` : "";
    const html = items.map((body) => {
      let inner = blocks(body.join("\n")).join("");
      if (!loose) inner = inner.replace(/^<p>([\s\S]*?)<\/p>/, "$1");
      return `<li>${inner}</li>`;
    }).join("");
    return [ordered ? `<ol${start}>${html}</ol>` : `<ul>${html}</ul>`, i];
  }

  // The source as a list of top-level blocks, each an HTML string.
  function blocks(source) {
    const lines = source.replace(/\r\n?/g, "\n").split("\n");
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (blank(line)) { i += 1; continue; }
      if ((m = FENCE.exec(line))) {
        const marker = m[1];
        const close = new RegExp(`^ {0,3}${marker[0] === "`" ? "`" : "~"}{${marker.length},}\\s*$`);
        const body = [];
        i += 1;
        while (i < lines.length && !close.test(lines[i])) { body.push(lines[i]); i += 1; }
        i += 1; // the closing fence (or the end of a block still streaming)
        out.push(code(m[2] || "", body.join("\n")));
      } else if ((m = HEADING.exec(line))) {
        out.push(`<h${m[1].length}>${inline(m[2] || "")}</h${m[1].length}>`);
        i += 1;
      } else if (RULE.test(line)) {
        out.push("<hr>");
        i += 1;
      } else if (QUOTE.test(line)) {
        const body = [];
        while (i < lines.length && !blank(lines[i]) && (QUOTE.test(lines[i]) || body.length)) {
          body.push(lines[i].replace(QUOTE, ""));
          i += 1;
        }
        out.push(`<blockquote>${blocks(body.join("\n")).join("")}</blockquote>`);
      } else if (ITEM.test(line) && (ITEM.exec(line)[3] || "").trim()) {
        const [html, next] = list(lines, i);
        out.push(html);
        i = next;
      } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-")) {
        const head = line;
        const rule = lines[i + 1];
        const rows = [];
        i += 2;
        while (i < lines.length && !blank(lines[i]) && lines[i].includes("|")) { rows.push(lines[i]); i += 1; }
        out.push(table(head, rule, rows));
      } else {
        const body = [line];
        i += 1;
        while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i])) { body.push(lines[i]); i += 1; }
        out.push(`<p>${inline(body.join("\n").trim())}</p>`);
      }
    }
    return out;
  }

  // Render `source` into `el`, touching only the top-level blocks whose HTML changed.
  function render(el, source) {
    const html = blocks(source);
    const template = document.createElement("template");
    html.forEach((block, n) => {
      const old = el.children[n];
      if (old && old.mdHtml === block) return;
      template.innerHTML = block;
      const node = template.content.firstElementChild;
      node.mdHtml = block;
      if (old) old.replaceWith(node);
      else el.append(node);
    });
    while (el.children.length > html.length) el.lastElementChild.remove();
  }

  return { render, blocks, inline, escape };
})();
