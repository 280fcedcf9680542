// Small shared pieces: the html tag, number and time formatting, the confirmation dialog,
// toasts. Nothing here talks to the server.
import { Component, h } from "../vendor/preact.module.js";
import { useEffect, useRef } from "../vendor/hooks.module.js";
import htm from "../vendor/htm.module.js";

export const html = htm.bind(h);

// A component that re-renders only when a prop changes (preact/compat's memo, without compat).
export function memo(render) {
  class Memo extends Component {
    shouldComponentUpdate(next) {
      for (const k in next) if (next[k] !== this.props[k]) return true;
      for (const k in this.props) if (!(k in next)) return true;
      return false;
    }

    render(props) {
      return h(render, props);
    }
  }
  return Memo;
}

export function fmtUtil(v) {
  if (v === null || v === undefined) return "—";
  return v.toFixed(v >= 10 ? 1 : 2);
}

export function fmtRate(v) {
  if (v === null || v === undefined) return "—";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return v >= 10 ? v.toFixed(0) : v.toFixed(1);
}

export function fmtGbps(v) {
  if (v === null || v === undefined) return "—";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1);
}

export function fmtTime(us) {
  if (!us) return "—";
  const d = new Date(us / 1000);
  return d.toLocaleTimeString([], { hour12: false });
}

export function fmtDateTime(us) {
  if (!us) return "—";
  const d = new Date(us / 1000);
  return `${d.toLocaleDateString()} ${d.toLocaleTimeString([], { hour12: false })}`;
}

export function fmtAgo(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

// Natural order: leaf2 before leaf10.
const collator = new Intl.Collator(undefined, { numeric: true });
export const naturalCompare = (a, b) => collator.compare(a, b);

// A modal confirmation: { title, body, confirm, danger, onConfirm, input? }.
export function ConfirmDialog({ ask, onClose }) {
  const ref = useRef(null);
  const inputRef = useRef(null);
  useEffect(() => {
    const d = ref.current;
    if (d && ask && !d.open) d.showModal();
    if (inputRef.current) inputRef.current.focus();
  }, [ask]);
  if (!ask) return null;
  const submit = (ev) => {
    ev.preventDefault();
    const value = inputRef.current ? inputRef.current.value.trim() : undefined;
    if (ask.input && ask.input.required && !value) return;
    ref.current.close();
    onClose();
    ask.onConfirm(value);
  };
  const cancel = () => { ref.current.close(); onClose(); };
  return html`
    <dialog ref=${ref} class="confirm" onCancel=${cancel} data-testid="confirm">
      <form method="dialog" onSubmit=${submit}>
        <h3>${ask.title}</h3>
        <p>${ask.body}</p>
        ${ask.input && html`<label class="field">${ask.input.label}
          <input ref=${inputRef} name="reason" value=${ask.input.value || ""} autocomplete="off" /></label>`}
        <div class="buttons">
          <button type="button" onClick=${cancel}>Cancel</button>
          <button type="submit" class=${ask.danger ? "danger" : "primary"} data-testid="confirm-ok">${ask.confirm}</button>
        </div>
      </form>
    </dialog>`;
}

export function Toasts({ toasts, onDismiss }) {
  return html`<div class="toasts" aria-live="polite">
    ${toasts.map((t) => html`<div key=${t.id} class=${"toast " + t.kind} data-testid="toast"
        onClick=${() => onDismiss(t.id)}>${t.text}</div>`)}
  </div>`;
}

export function Badge({ kind, children }) {
  return html`<span class=${"badge " + kind}>${children}</span>`;
}
