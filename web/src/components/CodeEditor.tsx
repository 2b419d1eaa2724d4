import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { javascript } from "@codemirror/lang-javascript";
import { python } from "@codemirror/lang-python";
import {
  defaultHighlightStyle,
  indentOnInput,
  StreamLanguage,
  syntaxHighlighting,
} from "@codemirror/language";
import { groovy } from "@codemirror/legacy-modes/mode/groovy";
import { shell } from "@codemirror/legacy-modes/mode/shell";
import { EditorState, type Extension } from "@codemirror/state";
import { EditorView, keymap, lineNumbers } from "@codemirror/view";
import { useEffect, useRef } from "react";

function language(type: string): Extension {
  switch (type) {
    case "bash":
      return StreamLanguage.define(shell);
    case "groovy":
      return StreamLanguage.define(groovy);
    case "python":
      return python();
    case "typescript":
      return javascript({ typescript: true });
    default:
      return javascript();
  }
}

/** A CodeMirror 6 editor. Tab indents; Ctrl+M (Shift+Alt+M on macOS) toggles whether Tab
 * leaves the editor, so keyboard users are never trapped (CodeMirror's tab-focus mode). */
export function CodeEditor(props: {
  value: string;
  language: string;
  label: string;
  onChange: (value: string) => void;
}) {
  const host = useRef<HTMLDivElement>(null);
  const onChange = useRef(props.onChange);
  onChange.current = props.onChange;

  useEffect(() => {
    if (!host.current) return;
    const view = new EditorView({
      parent: host.current,
      state: EditorState.create({
        doc: props.value,
        extensions: [
          lineNumbers(),
          history(),
          indentOnInput(),
          syntaxHighlighting(defaultHighlightStyle),
          language(props.language),
          keymap.of([indentWithTab, ...defaultKeymap, ...historyKeymap]),
          EditorView.contentAttributes.of({ "aria-label": props.label }),
          EditorView.updateListener.of((update) => {
            if (update.docChanged) onChange.current(update.state.doc.toString());
          }),
        ],
      }),
    });
    return () => view.destroy();
    // The document is owned by the editor after mount; the language remounts it.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [props.language]);

  return (
    <div className="code-editor">
      <div ref={host} />
      <p className="hint">Tab indents. Press Ctrl+M, then Tab, to move focus out of the editor.</p>
    </div>
  );
}
