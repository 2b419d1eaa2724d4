import { Help } from "./Help";

/** A settings section's heading with its "?" explanation. */
export function SectionHead(props: { title: string; children: React.ReactNode }) {
  return (
    <div className="toolbar">
      <h1>{props.title}</h1>
      <Help topic={props.title}>{props.children}</Help>
    </div>
  );
}
