import { useId, useState } from "react";

/** A "?" button that shows a short explanation: what a section or action does, who sees
 * it, and how to undo it. */
export function Help(props: { topic: string; children: React.ReactNode }) {
  const [open, setOpen] = useState(false);
  const id = useId();
  return (
    <span className="help">
      <button
        type="button"
        className="help-toggle"
        aria-expanded={open}
        aria-controls={id}
        aria-label={`Help: ${props.topic}`}
        onClick={() => setOpen((o) => !o)}
      >
        ?
      </button>
      {open && (
        <span id={id} role="note" className="help-text">
          {props.children}
        </span>
      )}
    </span>
  );
}
