"""What a student would see wrong on a notebook page, measured in the page itself.

Each check is JavaScript run in JupyterLab on the open notebook once its cells have run;
it returns one line per problem, naming the cell (``cell 12``, counting from 1 as the
notebook's cells are listed). Only what a person would notice is checked:

- an error or stderr output, also inside an Output widget;
- a cell that never ran (Run All stopped at an error), or a printed wall (an output of
  more than ``MAX_LINES`` lines: more than a screen, where an excerpt would teach);
- a promise of the page not kept: the tables and charts a cell's metadata says it shows
  (``workbench.shows``, written by workbench/notebooks.py) are not all under it, or a
  check's cell shows something beside its verdict (a line to read past, or to contradict
  it);
- a label cut off: a widget's description, a button's text, a drop-down's chosen option
  or any text drawn with an ellipsis that does not fit its box; a Bokeh title wider than
  the canvas right of the plot area's left edge;
- a chart without an axis label, or whose category labels are wider than the room each
  category gets (they overlap), or with no data at all and no word saying why;
- a table with two columns under the same header.

Bokeh draws on canvases, so what it draws is read from its models (`Bokeh.index`, every
view BokehJS has built in this page) and measured with the font it draws with.
"""

from __future__ import annotations

#: An output longer than this many lines is a wall of text, not a lesson.
MAX_LINES = 50

#: JavaScript helpers shared by the checks: the open notebook and its code cells.
_NOTEBOOK = """
const app = window.jupyterapp;
const panel = app.shell.currentWidget;
const cells = panel.content.widgets;
const where = (i) => `cell ${i + 1}`;
"""

#: JavaScript: {cells: code cells, running: queued or running, unrun: never ran, kernel}.
PROGRESS_JS = "() => {" + _NOTEBOOK + """
  let running = 0, unrun = 0, code = 0;
  cells.forEach((c) => {
    if (c.model.type !== 'code') return;
    code += 1;
    const prompt = c.promptNode ? c.promptNode.textContent : '';
    if (prompt.includes('*') || c.model.executionState === 'running') running += 1;
    else if (c.model.executionCount === null) unrun += 1;
  });
  const k = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return {code, running, unrun, kernel: k ? k.status : 'none'};
}"""

#: JavaScript: the problems of the page (see the module's docstring), as lines of text.
PROBLEMS_JS = "(maxLines) => {" + _NOTEBOOK + """
  const out = [];
  const text = (el) => (el.innerText || el.textContent || '').trim();
  const short = (s) => s.replace(/\\s+/g, ' ').slice(0, 160);
  const measure = document.createElement('canvas').getContext('2d');
  const width = (s, font) => { measure.font = font; return measure.measureText(s).width; };
  const font = (obj, prefix) => {
    const style = obj[`${prefix}_font_style`] || 'normal';
    return `${style === 'normal' ? '' : style} ${obj[`${prefix}_font_size`] || '13px'} `
           + `${obj[`${prefix}_font`] || 'helvetica'}`;
  };
  const value = (v) => (v && typeof v === 'object' && 'value' in v) ? v.value : v;

  // The Bokeh plots under a node: every plot view below a root view BokehJS built there.
  const plotsUnder = (root) => {
    const found = [], seen = new Set();
    const walk = (v) => {
      if (!v || seen.has(v)) return;
      seen.add(v);
      if (v.model && 'x_range' in v.model && v.frame) found.push(v);
      for (const child of v.children()) walk(child);
    };
    walk(root);
    return found;
  };
  const roots = window.Bokeh && window.Bokeh.index ? [...window.Bokeh.index] : [];
  const plotsIn = (node) => roots.filter((r) => r.el && node.contains(r.el)).flatMap(plotsUnder);

  cells.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    const node = cell.node;
    const outputs = cell.model.outputs.toJSON();
    if (cell.model.executionCount === null) out.push(`${where(i)} never ran`);
    for (const o of outputs) {
      if (o.output_type === 'error') {
        out.push(`${where(i)}: ${o.ename}: ${short(o.evalue)}`);
      } else if (o.output_type === 'stream' && o.name === 'stderr') {
        out.push(`${where(i)} wrote to stderr: ${short([].concat(o.text).join(''))}`);
      }
    }
    // stderr and errors inside Output widgets (not in the cell's own outputs)
    node.querySelectorAll('.widget-output [data-mime-type="application/vnd.jupyter.stderr"], '
                          + '.widget-output [data-mime-type="application/vnd.jupyter.error"]')
      .forEach((el) => out.push(`${where(i)}: an output widget shows an error: `
                                + short(text(el))));
    // walls of printed text (an Output widget that scrolls keeps its height: it is no wall)
    node.querySelectorAll('.jp-OutputArea-output pre').forEach((pre) => {
      const lines = (pre.textContent || '').replace(/\\n$/, '').split('\\n').length;
      if (lines > maxLines && !pre.closest('.widget-output'))
        out.push(`${where(i)}: an output of ${lines} lines (over ${maxLines}): ` +
                 short((pre.textContent || '').split('\\n')[0]));
    });
    // the promises of the page
    const meta = (cell.model.getMetadata ? cell.model.getMetadata('workbench')
                  : cell.model.metadata.get('workbench')) || {};
    const promised = meta.shows || {};
    const tables = node.querySelectorAll('.jp-Cell-outputWrapper table').length;
    const charts = plotsIn(node).length;
    if ((promised.table || 0) > tables)
      out.push(`${where(i)} promises ${promised.table} table(s) and shows ${tables}`);
    if ((promised.chart || 0) > charts)
      out.push(`${where(i)} promises ${promised.chart} chart(s) and shows ${charts}`);
    if (promised.verdict) {   // a check: its verdict, and nothing to read past or contradict
      const shown = [...node.querySelectorAll('.jp-Cell-outputArea > .jp-OutputArea-child')]
        .map((o) => text(o).replace(/^\\[\\d*\\]:\\s*/, '')).filter((t) => t);
      const verdicts = shown.filter((t) => /^(✔ Correct|✘ Not yet)/.test(t));
      if (verdicts.length < promised.verdict)
        out.push(`${where(i)} is a check and shows no verdict`);
      for (const t of shown.filter((t) => !/^(✔ Correct|✘ Not yet)/.test(t)))
        out.push(`${where(i)} is a check and shows more than its verdict: ${short(t)}`);
    }
    // labels cut off: the laid-out text (a Range over it, which an ellipsis does not
    // shorten) wider than the box's content (scrollWidth rounds a 1 px cut away)
    node.querySelectorAll('.jp-Cell-outputWrapper *').forEach((el) => {
      if (!el.offsetParent || el.children.length > 0 && !el.matches('button, label')) return;
      const style = getComputedStyle(el);
      const cuts = style.textOverflow === 'ellipsis' || el.matches(
        '.widget-label, .widget-label-basic, label, button, .jupyter-button');
      if (!cuts || style.overflow === 'visible' || !text(el) || !el.clientWidth) return;
      const range = document.createRange();
      range.selectNodeContents(el);
      const need = range.getBoundingClientRect().width;
      const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      if (need > room + 0.5)
        out.push(`${where(i)}: the label "${short(text(el))}" is cut off ` +
                 `(${Math.round(need)} px of text in ${Math.round(room)} px)`);
    });
    // a drop-down whose chosen option is wider than its box (it is clipped, no ellipsis)
    node.querySelectorAll('.jp-Cell-outputWrapper select').forEach((el) => {
      const chosen = el.selectedIndex >= 0 ? el.options[el.selectedIndex].text : '';
      const style = getComputedStyle(el);
      const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      if (el.offsetParent && el.clientWidth && chosen && width(chosen, style.font) > room + 0.5)
        out.push(`${where(i)}: the choice "${short(chosen)}" is cut off ` +
                 `(${Math.round(width(chosen, style.font))} px of text in ${Math.round(room)} px)`);
    });
    // tables: two columns with one header
    node.querySelectorAll('.jp-Cell-outputWrapper table').forEach((table) => {
      const rows = table.tHead ? table.tHead.rows : [table.rows[0]];
      if (!rows.length || !rows[rows.length - 1]) return;
      const heads = [...rows[rows.length - 1].cells].map((c) => text(c)).filter((h) => h);
      const twice = heads.filter((h, k) => heads.indexOf(h) !== k);
      if (twice.length) out.push(`${where(i)}: a table has two columns headed "${twice[0]}"`);
    });
    // charts
    for (const view of plotsIn(node)) {
      const m = view.model;
      const title = m.title && value(m.title.text) || '';
      const name = title ? `the chart "${title}"` : 'a chart without a title';
      // the title starts above the plot area, after the y axis, and is clipped at the
      // canvas's right edge
      const canvas = view.canvas_view ? view.canvas_view.bbox.width : m.width;
      const titleRoom = canvas - (view.frame ? view.frame.bbox.left : 0);
      if (title && width(title, font(m.title, 'text')) > titleRoom)
        out.push(`${where(i)}: ${name}: the title is wider than the chart ` +
                 `(${Math.round(width(title, font(m.title, 'text')))} px in ` +
                 `${Math.round(titleRoom)} px)`);
      const sides = [...m.below.map((a) => ['x', a]), ...m.above.map((a) => ['x', a]),
                     ...m.left.map((a) => ['y', a]), ...m.right.map((a) => ['y', a])];
      for (const [side, axis] of sides) {
        if (axis.type && axis.type.endsWith('Axis') && axis.visible && !value(axis.axis_label))
          out.push(`${where(i)}: ${name}: its ${side} axis has no label`);
      }
      const x = m.x_range;
      if (x && x.factors && x.factors.length && view.frame) {
        const room = view.frame.bbox.width / x.factors.length;
        for (const axis of m.below.filter((a) => a.type && a.type.endsWith('Axis'))) {
          const f = font(axis, 'major_label_text');
          const angle = typeof axis.major_label_orientation === 'number'
            ? Math.abs(axis.major_label_orientation) : 0;
          const widest = Math.max(...x.factors.map((c) => width(String(c), f)));
          const span = widest * Math.cos(angle) + 12 * Math.sin(angle);
          if (span > room)
            out.push(`${where(i)}: ${name}: its category labels overlap ` +
                     `(${Math.round(widest)} px of label, ${Math.round(room)} px per category)`);
        }
      }
      // drawn: a glyph with a finite value in a column it plots (a bar: a non-zero one)
      const drawn = m.renderers.some((r) => {
        if (!r.data_source || !r.glyph) return false;
        const data = r.data_source.data instanceof Map ? Object.fromEntries(r.data_source.data)
                                                       : r.data_source.data || {};
        const fields = [];
        for (const prop of ['y', 'top', 'right']) {
          const spec = prop in r.glyph ? r.glyph[prop] : null;
          if (spec && typeof spec.field === 'string') fields.push(spec.field);
          else if (spec && spec.expr && spec.expr.fields) fields.push(...spec.expr.fields);
        }
        const bar = /Bar$/.test(r.glyph.type || '');
        return (fields.length ? fields.map((f) => data[f] || []) : Object.values(data)).some(
          (col) => Array.from(col).some((v) => typeof v !== 'number' ? v != null
                                               : Number.isFinite(v) && (!bar || v !== 0)));
      });
      const said = [...m.center, ...m.above, ...m.below].some(
        (a) => a.type === 'Label' && value(a.text));
      if (!drawn && !said)
        out.push(`${where(i)}: ${name} is empty and says nothing about why`);
    }
  });
  return out;
}"""

#: JavaScript: press the button labelled `label` under the cell, and return how many
#: output widgets of its own panel then hold something (0 if none of them does).
PRESS_JS = "([index, label]) => {" + _NOTEBOOK + """
  const node = cells[index].node;
  const button = [...node.querySelectorAll('button')].find(
    (b) => b.innerText.trim() === label);
  if (!button) return null;
  button.click();
  return true;
}"""

#: JavaScript: what is under cell `index` now: its tables, its charts' count is not
#: needed here; whether an Output widget near the button holds anything.
AFTER_PRESS_JS = "([index, label]) => {" + _NOTEBOOK + """
  const node = cells[index].node;
  const button = [...node.querySelectorAll('button')].find(
    (b) => b.innerText.trim() === label);
  let box = button;
  while (box && box !== node && !box.querySelector('.widget-output')) box = box.parentElement;
  const outputs = box && box !== node ? [...box.querySelectorAll('.widget-output')] : [];
  return {
    outputs: outputs.length,
    filled: outputs.filter((o) => o.querySelector('.jp-OutputArea-output')).length,
    tables: node.querySelectorAll('.jp-Cell-outputWrapper table').length,
    text: outputs.map((o) => (o.innerText || '').trim()).join(' | ').slice(0, 200),
  };
}"""

#: JavaScript: the height of the page down to the notebook's last cell, to photograph it
#: whole (the notebook's own scroll height adds a screen of room below the last cell).
CONTENT_HEIGHT_JS = "() => {" + _NOTEBOOK + """
  const scroller = panel.content.node.querySelector('.jp-WindowedPanel-outer') ||
                   panel.content.node;
  const last = cells[cells.length - 1].node.getBoundingClientRect();
  return Math.ceil(last.bottom + scroller.scrollTop + 30);
}"""
