use crate::util::Result;
pub fn run(_args: &[String]) -> Result {
    Err("todo".into())
}
