/** The loading, empty and error states every list and page shares. */
export function Notice(props: { kind: "loading" | "empty" | "error"; text: string }) {
  const role = props.kind === "error" ? "alert" : "status";
  return (
    <p className={`notice notice-${props.kind}`} role={role}>
      {props.text}
    </p>
  );
}

/** A control the user's permissions do not allow: disabled, with the reason beside it. */
export function Denied(props: { reason: string | null }) {
  if (!props.reason) return null;
  return <span className="denied">{props.reason}</span>;
}

export function errorText(error: unknown): string {
  if (error instanceof Error && error.message) return error.message;
  return "Something went wrong.";
}
