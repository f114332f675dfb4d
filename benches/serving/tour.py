"""The README tour's two notes, and questions a visitor asks of them (the
benchmarks' small store; data only, so importing it costs nothing)."""

TOUR = [
    {
        "id": "hours",
        "text": "The Calder City Museum is open Tuesday to Sunday from 10:00 to 18:00 and "
        "closed on Mondays.",
    },
    {"id": "wifi", "text": "The office guest Wi-Fi network is called Calder-Guest."},
]
TOUR_QUESTIONS = [
    "What is the guest Wi-Fi network called?",
    "On which day is the museum closed?",
    "What are the museum's opening hours?",
    "What's the name of the visitor wireless network?",
    "When does the museum open on Sundays?",
    "Is the museum open on Tuesdays?",
    "What is the Wi-Fi password?",
    "How much is a ticket to the museum?",
]
