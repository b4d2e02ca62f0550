"""Replies in French, Spanish or German: the offline model's phrasebook.

Owns `LANGUAGES` (the names a prompt may use) and `translate(text, lang)`. The writers compose
English from fixed sentence templates with the prompt's own words in the slots, so each template
has a hand translation here and the slot text (the user's topic, a quote, a citation) is carried
over as written, as a real model keeps a technical term. A line no template matches falls back
to a small glossary of common words, so nothing stays wholly English.
"""

from __future__ import annotations

import functools
import re

# Names a prompt may use for each language -> code.
LANGUAGES = {
    "french": "fr", "français": "fr", "francais": "fr",
    "spanish": "es", "español": "es", "espanol": "es", "castilian": "es",
    "german": "de", "deutsch": "de",
    "english": "en",
}

# (English template, French, Spanish, German); {} is a slot copied across unchanged.
_TEMPLATES = (
    # plan
    ("Research plan: {}", "Plan de recherche : {}", "Plan de investigación: {}", "Forschungsplan: {}"),
    ("Plan for researching {}", "Plan pour étudier {}", "Plan para investigar {}", "Plan zur Erforschung von {}"),
    ("Research questions on {}", "Questions de recherche sur {}", "Preguntas de investigación sobre {}",
     "Forschungsfragen zu {}"),
    ("What is currently known about {}, and how strong is the evidence?",
     "Que sait-on actuellement de {}, et quelle est la solidité des preuves ?",
     "¿Qué se sabe actualmente sobre {} y qué solidez tienen las pruebas?",
     "Was ist derzeit über {} bekannt, und wie belastbar sind die Belege?"),
    ("What does the most recent evidence say about {}?", "Que disent les données les plus récentes sur {} ?",
     "¿Qué dicen las pruebas más recientes sobre {}?", "Was sagen die neuesten Belege über {}?"),
    ("Which key terms in {} need a precise definition, and how are they measured?",
     "Quels termes clés de {} demandent une définition précise, et comment les mesure-t-on ?",
     "¿Qué términos clave de {} necesitan una definición precisa y cómo se miden?",
     "Welche Schlüsselbegriffe in {} brauchen eine genaue Definition, und wie werden sie gemessen?"),
    ("Which mechanisms link {} and {}?", "Quels mécanismes relient {} et {} ?",
     "¿Qué mecanismos relacionan {} y {}?", "Welche Mechanismen verbinden {} und {}?"),
    ("Which mechanisms drive {}?", "Quels mécanismes déterminent {} ?", "¿Qué mecanismos impulsan {}?",
     "Welche Mechanismen treiben {} an?"),
    ("What measurable effects involving {} have been reported, and at what scale?",
     "Quels effets mesurables liés à {} ont été rapportés, et à quelle échelle ?",
     "¿Qué efectos medibles relacionados con {} se han descrito y a qué escala?",
     "Welche messbaren Effekte im Zusammenhang mit {} wurden berichtet, und in welchem Umfang?"),
    ("Where do experts disagree about {}, and why?",
     "Sur quels points les experts sont-ils en désaccord à propos de {}, et pourquoi ?",
     "¿En qué discrepan los expertos sobre {} y por qué?", "Wo sind sich Fachleute über {} uneinig, und warum?"),
    ("What are the main risks and limitations concerning {}?",
     "Quels sont les principaux risques et limites concernant {} ?",
     "¿Cuáles son los principales riesgos y limitaciones de {}?",
     "Was sind die wichtigsten Risiken und Grenzen von {}?"),
    ("How has the understanding of {} changed over the last decade?",
     "Comment la compréhension de {} a-t-elle évolué au cours de la dernière décennie ?",
     "¿Cómo ha cambiado la comprensión de {} en la última década?",
     "Wie hat sich das Verständnis von {} im letzten Jahrzehnt verändert?"),
    ("Which open questions about {} remain unresolved?", "Quelles questions ouvertes sur {} restent sans réponse ?",
     "¿Qué preguntas abiertas sobre {} siguen sin resolver?", "Welche offenen Fragen zu {} sind noch ungeklärt?"),
    ("Who is most affected by {}, and how?", "Qui est le plus touché par {}, et comment ?",
     "¿Quién se ve más afectado por {} y de qué manera?", "Wer ist am stärksten von {} betroffen, und wie?"),
    ("What would a practical recommendation on {} need to address?",
     "Que devrait couvrir une recommandation pratique sur {} ?",
     "¿Qué debería abordar una recomendación práctica sobre {}?",
     "Was müsste eine praktische Empfehlung zu {} berücksichtigen?"),
    ("Each question will be answered from cited sources before drafting the report.",
     "Chaque question sera traitée à partir de sources citées avant la rédaction du rapport.",
     "Cada pregunta se responderá con fuentes citadas antes de redactar el informe.",
     "Jede Frage wird anhand zitierter Quellen beantwortet, bevor der Bericht entsteht."),
    ("Answer each question from the retrieved sources, citing them.",
     "Répondre à chaque question à partir des sources trouvées, en les citant.",
     "Responder a cada pregunta con las fuentes recuperadas, citándolas.",
     "Jede Frage mit den gefundenen Quellen beantworten und sie zitieren."),
    ("The questions are ordered from background to recommendations.",
     "Les questions vont du contexte aux recommandations.", "Las preguntas van del contexto a las recomendaciones.",
     "Die Fragen reichen vom Hintergrund bis zu den Empfehlungen."),
    # generic
    ("Here is a brief overview of {}.", "Voici un bref aperçu de {}.", "Este es un breve resumen de {}.",
     "Hier ist ein kurzer Überblick über {}."),
    ("On {}:", "À propos de {} :", "Sobre {}:", "Zu {}:"),
    ("A short answer on {}.", "Une réponse courte sur {}.", "Una respuesta breve sobre {}.", "Eine kurze Antwort zu {}."),
    ("Regarding {}:", "Concernant {} :", "En cuanto a {}:", "Was {} betrifft:"),
    ('To answer "{}?" briefly:', "Pour répondre brièvement à « {} ? » :", "Para responder brevemente a «¿{}?»:",
     "Kurz zur Frage „{}?“:"),
    ('On the question "{}?":', "Sur la question « {} ? » :", "Sobre la pregunta «¿{}?»:", "Zur Frage „{}?“:"),
    ('A short answer to "{}?":', "Une réponse courte à « {} ? » :", "Una respuesta breve a «¿{}?»:",
     "Eine kurze Antwort auf „{}?“:"),
    ('Briefly, on "{}?":', "En bref, sur « {} ? » :", "En resumen, sobre «¿{}?»:", "Kurz gesagt, zu „{}?“:"),
    ("The central aspects are {}.", "Les aspects essentiels sont {}.", "Los aspectos centrales son {}.",
     "Die zentralen Aspekte sind {}."),
    ("The main points to consider are {}.", "Les principaux points à considérer sont {}.",
     "Los puntos principales a considerar son {}.", "Die wichtigsten Punkte sind {}."),
    ("It comes down to {}.", "Tout se ramène à {}.", "Todo se reduce a {}.", "Es läuft auf {} hinaus."),
    ("A careful answer weighs the evidence on {} against the practical constraints around {}.",
     "Une réponse réfléchie met en balance les preuves sur {} et les contraintes pratiques liées à {}.",
     "Una respuesta cuidadosa sopesa las pruebas sobre {} frente a las limitaciones prácticas de {}.",
     "Eine sorgfältige Antwort wägt die Belege zu {} gegen die praktischen Grenzen von {} ab."),
    ("Evidence on {} matters most, but {} shapes how it applies in practice.",
     "Les preuves sur {} comptent le plus, mais {} détermine leur application pratique.",
     "Las pruebas sobre {} son lo más importante, pero {} determina cómo se aplican en la práctica.",
     "Die Belege zu {} zählen am meisten, aber {} bestimmt, wie sie sich in der Praxis auswirken."),
    ("Start with {}; then examine how {} changes the picture.",
     "Commencez par {} ; puis examinez comment {} change la donne.",
     "Empiece por {}; luego examine cómo {} cambia el panorama.",
     "Beginnen Sie mit {}; prüfen Sie dann, wie {} das Bild verändert."),
    ("A careful answer starts from what is established about {}.",
     "Une réponse réfléchie part de ce qui est établi sur {}.",
     "Una respuesta cuidadosa parte de lo que se sabe con certeza sobre {}.",
     "Eine sorgfältige Antwort beginnt mit dem, was über {} gesichert ist."),
    ("The evidence on {} is the place to start.", "Les preuves sur {} sont le point de départ.",
     "Las pruebas sobre {} son el punto de partida.", "Die Belege zu {} sind der Ausgangspunkt."),
    ("It helps to separate what is known about {} from what is assumed.",
     "Il est utile de distinguer ce que l'on sait de {} de ce que l'on suppose.",
     "Conviene separar lo que se sabe sobre {} de lo que se supone.",
     "Es hilft, das Wissen über {} von Annahmen zu trennen."),
    ("Conclusions should be checked against primary sources.",
     "Les conclusions doivent être vérifiées dans les sources primaires.",
     "Las conclusiones deben contrastarse con fuentes primarias.",
     "Schlussfolgerungen sollten an Primärquellen geprüft werden."),
    ("Where the evidence is thin, the answer should say so.", "Là où les preuves sont minces, la réponse doit le dire.",
     "Donde las pruebas son escasas, la respuesta debe decirlo.",
     "Wo die Beleglage dünn ist, sollte die Antwort das sagen."),
    ("Any recommendation should state its assumptions.", "Toute recommandation doit énoncer ses hypothèses.",
     "Toda recomendación debe explicitar sus supuestos.", "Jede Empfehlung sollte ihre Annahmen offenlegen."),
    ("A follow-up question is how {} will develop.", "Une question de suivi est de savoir comment {} va évoluer.",
     "Una pregunta complementaria es cómo evolucionará {}.", "Eine Folgefrage ist, wie sich {} entwickeln wird."),
    ("It is also worth asking who is affected by {}.", "Il vaut aussi la peine de se demander qui est touché par {}.",
     "También vale la pena preguntarse a quién afecta {}.", "Es lohnt sich auch zu fragen, wen {} betrifft."),
    ("There is no input to respond to.", "Il n'y a rien à quoi répondre.", "No hay nada a lo que responder.",
     "Es gibt keine Eingabe, auf die ich antworten kann."),
    # headings of the other writers
    ("Critique of the analysis:", "Critique de l'analyse :", "Crítica del análisis:", "Kritik der Analyse:"),
    ("Weaknesses found in the analysis:", "Faiblesses relevées dans l'analyse :", "Debilidades encontradas en el análisis:",
     "Schwächen der Analyse:"),
    ("Review of the draft:", "Relecture du brouillon :", "Revisión del borrador:", "Durchsicht des Entwurfs:"),
    ("Revised analysis:", "Analyse révisée :", "Análisis revisado:", "Überarbeitete Analyse:"),
    ("Revised draft:", "Brouillon révisé :", "Borrador revisado:", "Überarbeiteter Entwurf:"),
    ("Revision:", "Révision :", "Revisión:", "Überarbeitung:"),
    ("Verdict: revise before composing the report.", "Verdict : réviser avant de rédiger le rapport.",
     "Veredicto: revisar antes de redactar el informe.", "Urteil: vor dem Bericht überarbeiten."),
    ("Verdict: the analysis needs another pass before it can support a report.",
     "Verdict : l'analyse doit être reprise avant de pouvoir étayer un rapport.",
     "Veredicto: el análisis necesita otra revisión antes de sustentar un informe.",
     "Urteil: Die Analyse braucht einen weiteren Durchgang, bevor sie einen Bericht tragen kann."),
    ("Overall: promising, but not yet ready to publish.", "Dans l'ensemble : prometteur, mais pas encore publiable.",
     "En conjunto: prometedor, pero aún no listo para publicar.",
     "Insgesamt: vielversprechend, aber noch nicht reif für die Veröffentlichung."),
    ("# Report: {}", "# Rapport : {}", "# Informe: {}", "# Bericht: {}"),
    ("# {}: findings", "# {} : résultats", "# {}: hallazgos", "# {}: Ergebnisse"),
    ("# Briefing on {}", "# Note de synthèse sur {}", "# Informe breve sobre {}", "# Kurzbericht zu {}"),
    ("## Key findings", "## Principaux résultats", "## Hallazgos clave", "## Wichtigste Ergebnisse"),
    ("## Discussion", "## Discussion", "## Discusión", "## Diskussion"),
    ("## Conclusion", "## Conclusion", "## Conclusión", "## Fazit"),
    ("## Sources", "## Sources", "## Fuentes", "## Quellen"),
    ("Analysis of {}", "Analyse de {}", "Análisis de {}", "Analyse von {}"),
    ("Analysis: {}", "Analyse : {}", "Análisis: {}", "Analyse: {}"),
    ("What the sources say about {}", "Ce que disent les sources sur {}", "Lo que dicen las fuentes sobre {}",
     "Was die Quellen über {} sagen"),
    # tone lines (rewind.model.sim.style), so a playful or formal reply can also be in another language
    ("Let's go exploring: {}!", "Partons à l'aventure : {} !", "¡A explorar: {}!", "Auf geht's zur Entdeckung: {}!"),
    ("Adventure time: {}!", "C'est l'heure de l'aventure : {} !", "¡Hora de la aventura: {}!", "Abenteuerzeit: {}!"),
    ("Ooh, what a fun one!", "Oh, en voilà une amusante !", "¡Uy, qué pregunta tan divertida!",
     "Oh, was für eine schöne Frage!"),
    ("Great question, let's dive in!", "Excellente question, allons-y !", "¡Gran pregunta, vamos allá!",
     "Tolle Frage, legen wir los!"),
    ("Happy digging!", "Bonne chasse aux trouvailles !", "¡Feliz búsqueda!", "Viel Spaß beim Stöbern!"),
    ("Onwards, fellow explorers!", "En avant, chers explorateurs !", "¡Adelante, exploradores!",
     "Vorwärts, liebe Entdecker!"),
    ("Please find below a considered response.", "Veuillez trouver ci-dessous une réponse réfléchie.",
     "A continuación encontrará una respuesta meditada.", "Nachfolgend finden Sie eine wohlüberlegte Antwort."),
    ("The following is submitted for your consideration.", "Ce qui suit est soumis à votre attention.",
     "Lo siguiente se somete a su consideración.", "Das Folgende wird Ihnen zur Prüfung vorgelegt."),
    ("Respectfully submitted.", "Respectueusement soumis.", "Respetuosamente presentado.", "Hochachtungsvoll eingereicht."),
    ("I remain at your disposal for any further questions.",
     "Je reste à votre disposition pour toute question complémentaire.",
     "Quedo a su disposición para cualquier otra consulta.",
     "Für weitere Fragen stehe ich Ihnen gern zur Verfügung."),
)
_COLUMN = {"fr": 1, "es": 2, "de": 3}

# Common words of the writers' other sentences (critique items, report lines): a fallback.
_GLOSSARY = {
    "fr": {"the": "le", "and": "et", "of": "de", "is": "est", "are": "sont", "not": "pas", "no": "aucun",
           "source": "source", "sources": "sources", "analysis": "analyse", "claim": "affirmation",
           "evidence": "preuves", "report": "rapport", "reports": "rapporte", "finds": "constate",
           "notes": "note", "states": "affirme", "by": "par", "any": "aucune", "cited": "citée",
           "with": "avec", "from": "de", "this": "ce", "needs": "nécessite", "a": "un", "on": "sur",
           "in": "dans", "to": "à", "should": "devrait", "be": "être", "without": "sans"},
    "es": {"the": "el", "and": "y", "of": "de", "is": "es", "are": "son", "not": "no", "no": "ninguna",
           "source": "fuente", "sources": "fuentes", "analysis": "análisis", "claim": "afirmación",
           "evidence": "pruebas", "report": "informe", "reports": "informa", "finds": "constata",
           "notes": "señala", "states": "afirma", "by": "por", "any": "ninguna", "cited": "citada",
           "with": "con", "from": "de", "this": "este", "needs": "necesita", "a": "un", "on": "sobre",
           "in": "en", "to": "a", "should": "debería", "be": "ser", "without": "sin"},
    "de": {"the": "die", "and": "und", "of": "von", "is": "ist", "are": "sind", "not": "nicht", "no": "keine",
           "source": "Quelle", "sources": "Quellen", "analysis": "Analyse", "claim": "Behauptung",
           "evidence": "Belege", "report": "Bericht", "reports": "berichtet", "finds": "stellt fest",
           "notes": "vermerkt", "states": "erklärt", "by": "von", "any": "keine", "cited": "zitierte",
           "with": "mit", "from": "aus", "this": "dies", "needs": "braucht", "a": "ein", "on": "zu",
           "in": "in", "to": "zu", "should": "sollte", "be": "sein", "without": "ohne"},
}
_QUOTED = re.compile(r"(\"[^\"]*\"|\[doc:[^\]\s]+\])")
_ITEM = re.compile(r"^(\s*(?:\d+[.)]|[-*•])\s+)(.*)$")


@functools.lru_cache(maxsize=1)
def _compiled() -> list:
    out = []
    for row in _TEMPLATES:
        parts = [re.escape(p) for p in row[0].split("{}")]
        # A slot never spans a sentence end, so one template cannot swallow a paragraph.
        out.append((re.compile(r"((?:(?![.!?]\s).)+?)".join(parts) + r"\Z", re.S), row))
    return out


_AND = {"fr": " et ", "es": " y ", "de": " und "}


def _fill(template: str, slots: tuple, lang: str) -> str:
    # Slots are the prompt's words joined by the writers ("a, b and c"): only the "and" is ours.
    slots = tuple(re.sub(r" and (?!.* and )", _AND[lang], s, count=1) for s in slots)
    pieces = template.split("{}")
    return "".join(p + (slots[i] if i < len(slots) else "") for i, p in enumerate(pieces[:-1])) + pieces[-1]


def _sentence(text: str, lang: str) -> str:
    for pattern, row in _compiled():
        m = pattern.match(text)
        if m:
            return _fill(row[_COLUMN[lang]], m.groups(), lang)
    return None


def _glossary(text: str, lang: str) -> str:
    words = _GLOSSARY[lang]
    out = []
    for chunk in _QUOTED.split(text):
        if _QUOTED.fullmatch(chunk):  # a quote or a citation is carried over as written
            out.append(chunk)
            continue
        out.append(re.sub(r"[A-Za-z]+", lambda m: _swap(m.group(0), words), chunk))
    return "".join(out)


def _swap(word: str, words: dict) -> str:
    new = words.get(word.lower())
    if new is None:
        return word
    return new[:1].upper() + new[1:] if word[:1].isupper() else new


_SPLIT = re.compile(r"(?<=[.!?:])\s+")


def _line(line: str, lang: str) -> str:
    m = _ITEM.match(line)
    lead, body = (m.group(1), m.group(2)) if m else ("", line)
    if not body.strip():
        return line
    whole = _sentence(body, lang)
    if whole is not None:
        return lead + whole
    # A paragraph of template sentences ("Here is ... . It comes down to ... ."), one by one.
    pieces = _SPLIT.split(body)
    done = [_sentence(p, lang) for p in pieces]
    if len(pieces) > 1 and any(d is not None for d in done):
        return lead + " ".join(d if d is not None else _glossary(p, lang) for p, d in zip(pieces, done))
    return lead + _glossary(body, lang)


def translate(text: str, lang: str) -> str:
    """The text in `lang` ("fr", "es", "de"; "en" or unknown: unchanged), line by line."""
    if lang not in _COLUMN:
        return text
    return "\n".join(_line(line, lang) for line in text.split("\n"))
