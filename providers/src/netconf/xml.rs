//! A small XML element tree for NETCONF messages: built by patchbay and rendered
//! with every value escaped, or parsed from a device's reply with quick-xml. Pure.
//!
//! Parsing keeps local names only (namespace prefixes are dropped) and trims the text
//! of leaf elements: device replies are pretty-printed, and every value patchbay
//! reads is a token (a number, a name, a keyword) or a description whose grammar
//! allows no surrounding spaces.

use quick_xml::Reader;
use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::Event;

/// One element: its name, attributes, child elements and text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Element {
    /// The name as written (`nc:rpc`, `interface`); local name after parsing.
    pub name: String,
    /// Attributes in order (`xmlns` included when building).
    pub attrs: Vec<(String, String)>,
    /// Child elements in order.
    pub children: Vec<Element>,
    /// Text content (leaf elements).
    pub text: String,
}

impl Element {
    /// An empty element.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// A leaf with text.
    pub fn leaf(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
            ..Self::default()
        }
    }

    /// Adds an attribute.
    pub fn attr(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attrs.push((name.into(), value.into()));
        self
    }

    /// Adds a child.
    pub fn child(mut self, child: Element) -> Self {
        self.children.push(child);
        self
    }

    /// The value of attribute `name`.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first child named `name`.
    pub fn get(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The first child named `name`, created (appended) when missing.
    pub fn get_or_insert(&mut self, name: &str) -> &mut Element {
        let at = match self.children.iter().position(|c| c.name == name) {
            Some(i) => i,
            None => {
                self.children.push(Element::new(name));
                self.children.len() - 1
            }
        };
        &mut self.children[at]
    }

    /// Every element reached by following `path` (child names) from here.
    pub fn all_at<'a>(&'a self, path: &[String]) -> Vec<&'a Element> {
        let mut level = vec![self];
        for step in path {
            level = level
                .into_iter()
                .flat_map(|e| e.children.iter().filter(move |c| &c.name == step))
                .collect();
        }
        level
    }

    /// The text of the first element at `path`, if any.
    pub fn text_at(&self, path: &[String]) -> Option<&str> {
        self.all_at(path).first().map(|e| e.text.as_str())
    }

    /// The XML text, every attribute value and text escaped.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        out
    }

    fn render_into(&self, out: &mut String) {
        out.push('<');
        out.push_str(&self.name);
        for (k, v) in &self.attrs {
            out.push(' ');
            out.push_str(k);
            out.push_str("=\"");
            out.push_str(&escape(v.as_str()));
            out.push('"');
        }
        if self.children.is_empty() && self.text.is_empty() {
            out.push_str("/>");
            return;
        }
        out.push('>');
        out.push_str(&escape(self.text.as_str()));
        for c in &self.children {
            c.render_into(out);
        }
        out.push_str("</");
        out.push_str(&self.name);
        out.push('>');
    }

    /// Parses one document's root element (local names; leaf text trimmed).
    pub fn parse(xml: &str) -> Result<Element, String> {
        let mut reader = Reader::from_str(xml);
        let mut stack: Vec<Element> = Vec::new();
        let local = |raw: &[u8]| -> Result<String, String> {
            let name = std::str::from_utf8(raw).map_err(|e| e.to_string())?;
            Ok(name.rsplit(':').next().unwrap_or(name).to_owned())
        };
        loop {
            let event = reader
                .read_event()
                .map_err(|e| format!("at byte {}: {e}", reader.error_position()))?;
            let empty = matches!(event, Event::Empty(_));
            match event {
                Event::Start(start) | Event::Empty(start) => {
                    let mut el = Element::new(local(start.name().as_ref())?);
                    for a in start.attributes() {
                        let a = a.map_err(|e| e.to_string())?;
                        let value = a.unescape_value().map_err(|e| e.to_string())?.into_owned();
                        el.attrs.push((local(a.key.as_ref())?, value));
                    }
                    if empty {
                        match stack.last_mut() {
                            Some(parent) => parent.children.push(el),
                            None => return Ok(el),
                        }
                    } else {
                        stack.push(el);
                    }
                }
                Event::End(_) => {
                    let mut el = stack.pop().ok_or("an end tag without a start")?;
                    if el.children.is_empty() {
                        el.text = el.text.trim().to_owned();
                    } else {
                        el.text.clear();
                    }
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(el),
                        None => return Ok(el),
                    }
                }
                Event::Text(t) => {
                    if let Some(el) = stack.last_mut() {
                        el.text.push_str(&t.decode().map_err(|e| e.to_string())?);
                    }
                }
                Event::CData(t) => {
                    if let Some(el) = stack.last_mut() {
                        el.text.push_str(&t.decode().map_err(|e| e.to_string())?);
                    }
                }
                Event::GeneralRef(r) => {
                    let text = match r.resolve_char_ref().map_err(|e| e.to_string())? {
                        Some(c) => c.to_string(),
                        None => {
                            let name = r.decode().map_err(|e| e.to_string())?;
                            resolve_predefined_entity(&name)
                                .ok_or_else(|| format!("unknown entity &{name};"))?
                                .to_owned()
                        }
                    };
                    if let Some(el) = stack.last_mut() {
                        el.text.push_str(&text);
                    }
                }
                Event::Eof => {
                    return Err("the document ended before its root element closed".into());
                }
                Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_parse_back_unchanged() {
        let nasty = "a<b>&\"c\"'d ]]>]]>";
        let el = Element::new("interface")
            .attr("operation", "replace")
            .child(Element::leaf("name", "ge-0/0/1"))
            .child(Element::leaf("description", nasty));
        let xml = el.render();
        assert!(!xml.contains("]]>]]>"), "{xml}");
        assert!(!xml.contains("<b>"), "{xml}");
        let back = Element::parse(&xml).unwrap();
        assert_eq!(back, el);
    }

    #[test]
    fn parsing_drops_prefixes_and_trims_pretty_printed_leaves() {
        let xml = r#"<?xml version="1.0"?>
<nc:rpc-reply xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0" nc:message-id="7">
  <nc:data>
    <configuration xmlns="http://xml.juniper.net/xnm/1.1/xnm">
      <interfaces><interface><name>
ge-0/0/1
</name><disable/></interface></interfaces>
    </configuration>
  </nc:data>
</nc:rpc-reply>"#;
        let root = Element::parse(xml).unwrap();
        assert_eq!(root.name, "rpc-reply");
        assert_eq!(root.attribute("message-id"), Some("7"));
        let path: Vec<String> = ["data", "configuration", "interfaces", "interface"]
            .map(String::from)
            .to_vec();
        let ifs = root.all_at(&path);
        assert_eq!(ifs.len(), 1);
        assert_eq!(ifs[0].text_at(&["name".into()]), Some("ge-0/0/1"));
        assert!(ifs[0].get("disable").is_some());
        assert!(Element::parse("<a><b></a>").is_err());
        assert!(Element::parse("<a>").is_err());
    }
}
