import { useEffect, useRef } from "react";

/** A modal confirmation (the native dialog: focus is trapped and Escape cancels). */
export function Confirm(props: {
  text: string;
  action: string;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (dialog && !dialog.open) dialog.showModal();
  }, []);
  return (
    <dialog ref={ref} className="confirm" aria-label="Confirm" onCancel={props.onCancel}>
      <p>{props.text}</p>
      <div className="row">
        <button type="button" className="secondary" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="button" className="danger" onClick={props.onConfirm}>
          {props.action}
        </button>
      </div>
    </dialog>
  );
}
