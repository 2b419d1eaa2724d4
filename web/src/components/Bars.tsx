/** A bar chart of one value per slot; an empty slot (no data) draws nothing, unlike a 0. */
export function Bars(props: {
  label: string;
  values: (number | null)[];
  overlay?: (number | null)[];
  className?: string;
  overlayClassName?: string;
}) {
  const all = [...props.values, ...(props.overlay ?? [])].filter((v): v is number => v !== null);
  const most = Math.max(1e-9, ...all);
  const bar = (v: number | null, i: number, className: string) =>
    v === null ? null : (
      <rect
        key={`${className}-${i}`}
        x={i * 6}
        y={60 - (v / most) * 60}
        width={5}
        height={(v / most) * 60}
        className={className}
      />
    );
  return (
    <svg
      viewBox={`0 0 ${Math.max(1, props.values.length) * 6} 60`}
      role="img"
      aria-label={props.label}
      preserveAspectRatio="none"
    >
      {props.values.map((v, i) => bar(v, i, props.className ?? "bar-ok"))}
      {props.overlay?.map((v, i) => bar(v, i, props.overlayClassName ?? "bar-failed"))}
    </svg>
  );
}
