//! The agents: the ReAct loop they share (`react`), its history processing
//! (`history`), and the agents themselves — each a role, a command set, a
//! demonstration and a task.

pub mod history;
pub mod react;

use crate::aci::command::NAMES;
use crate::dataset::Task;
use react::Agent;

/// A worked example of the reply format for an agent that edits, on a made-up
/// repository.
pub const EDIT_DEMONSTRATION: &str = r#"ISSUE: Square.area() returns the perimeter instead of the area.

The issue names Square.area, so I will find that method.

```
search_method area Square
```
OBSERVATION:
Found 1 methods named "area" in class "Square":
geometry/square.py::Square.area  (lines 8-9)
8:    def area(self):
9:        return 4 * self.side
(Open file: n/a)

Line 9 computes the perimeter; I will open the file there to edit it.

```
open geometry/square.py 9
```
OBSERVATION:
[File: geometry/square.py (12 lines total)]
1:class Square:
...
8:    def area(self):
9:        return 4 * self.side
...
(Open file: geometry/square.py)

The area is the side squared, so line 9 becomes side * side.

```
edit 9:9
        return self.side * self.side
end_of_edit
```
OBSERVATION:
[File: geometry/square.py (12 lines total)]
...
9:        return self.side * self.side
...
File updated. Please review the changes and make sure they are correct (correct indentation, no duplicate lines, etc). Edit the file again if necessary.
(Open file: geometry/square.py)

The fix is in place, so I submit.

```
submit
```"#;

/// An agent that resolves an issue on its own with every command: the
/// SWE-agent setting, used to drive the interface end to end.
pub fn solver(task: &Task) -> Agent<'static> {
    Agent {
        name: "solver",
        role: "You are an expert Python developer. You fix the issue described below by \
               editing the repository's source files, then submit.",
        commands: NAMES,
        demonstration: EDIT_DEMONSTRATION,
        task: format!(
            "ISSUE:\n{}\n\nFind the code that causes the issue, edit it to fix the issue, \
             then submit.",
            task.problem_statement.trim()
        ),
    }
}
