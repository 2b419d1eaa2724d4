import { useState } from "react";
import { Confirm } from "./Confirm";

/** A column heading: its text, false to leave the column out, or a heading only screen
 * readers hear (a column of buttons). */
export type Header = string | false | { hidden: string };

/** A table that scrolls sideways inside its own box on a narrow screen. */
export function Table(props: { label: string; headers: Header[]; children: React.ReactNode }) {
  return (
    <div className="table-scroll">
      <table aria-label={props.label}>
        <thead>
          <tr>
            {props.headers.map((h, i) =>
              h === false ? null : (
                <th scope="col" key={i}>
                  {typeof h === "string" ? h : <span className="visually-hidden">{h.hidden}</span>}
                </th>
              ),
            )}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}

/** A small button in a row of a table, named for screen readers by what it acts on. */
export function RowButton(props: {
  label: string;
  name: string;
  kind?: "danger" | "secondary" | "";
  onClick: () => void;
}) {
  return (
    <button
      type="button"
      className={`small ${props.kind ?? "secondary"}`.trim()}
      aria-label={props.name}
      onClick={props.onClick}
    >
      {props.label}
    </button>
  );
}

/** A dangerous action that waits for a confirmation saying what it does and how to undo it. */
export function usePendingConfirm<T>(
  text: (item: T) => string,
  action: string,
  onConfirm: (item: T) => void,
) {
  const [pending, setPending] = useState<T | null>(null);
  const dialog =
    pending === null ? null : (
      <Confirm
        text={text(pending)}
        action={action}
        onCancel={() => setPending(null)}
        onConfirm={() => {
          const item = pending;
          setPending(null);
          onConfirm(item);
        }}
      />
    );
  return { ask: setPending, dialog };
}
